// Trainer's elastic training (trainer.h, Note [Elastic training]): the micro-batches a rank
// takes and their dropout streams, joining a group with its most advanced member's state, and
// regrouping after a failed collective or an agreed request.
#include "common/logging.h"
#include "worker/trainer/live_state.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

// Micro-batch j's dropout stream: the seed moved by j + 1 strides, its counter at the step's
// own block of 2^32.
constexpr uint64_t kMicroBatchSeedStride = 0x9E3779B97F4A7C15ull;
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";
// Regroups in a row that may fail (a member lost while the group forms) before Run gives up.
constexpr int kMaxRegroupTries = 8;

bool TakePrefix(std::string* name, const std::string& prefix) {
  if (name->compare(0, prefix.size(), prefix) != 0) return false;
  name->erase(0, prefix.size());
  return true;
}

}  // namespace

int64_t Trainer::StepMicroBatches() const {
  const int64_t accumulation = spec_.parallelism.grad_accumulation_steps;
  return elastic_ ? accumulation * spec_.parallelism.world_size : accumulation;
}

int64_t Trainer::RankMicroBatches() const {
  return elastic_ ? elastic_sampler_->rank_micro_batches()
                  : spec_.parallelism.grad_accumulation_steps;
}

void Trainer::SeedMicroBatch(int64_t i) {
  const uint64_t j = static_cast<uint64_t>(elastic_sampler_->MicroBatchIndex(i));
  gen_.SetState(spec_.seed + kMicroBatchSeedStride * (j + 1), static_cast<uint64_t>(step_) << 32);
}

Status Trainer::ElasticStepsPerEpoch() {
  // Note [Elastic shards]: the same at every world size (ElasticSampler::steps_per_epoch).
  const int64_t samples_per_step = spec_.batch_size * StepMicroBatches();
  steps_per_epoch_ = data_.train->size() / samples_per_step;
  if (steps_per_epoch_ > 0) return OkStatus();
  return InvalidArgumentError("batch_size = " + std::to_string(spec_.batch_size) +
                              " x parallelism.grad_accumulation_steps x parallelism.world_size = " +
                              std::to_string(StepMicroBatches()) + " micro-batches: a step's " +
                              std::to_string(samples_per_step) + " samples are more than the " +
                              std::to_string(data_.train->size()) + " training samples");
}

Status Trainer::MakeElasticLoader() {
  ASSIGN_OR_RETURN(
      std::unique_ptr<data::ElasticSampler> sampler,
      data::ElasticSampler::Create(data_.train->size(), spec_.batch_size, StepMicroBatches(), rank_,
                                   world_size_, spec_.data.shuffle, spec_.seed));
  TY_CHECK(sampler->steps_per_epoch() == steps_per_epoch_);
  shard_size_ = sampler->size();
  elastic_sampler_ = std::move(sampler);
  data::DataLoaderOptions options = LoaderOptions();
  options.drop_last = true;  // the shard holds whole micro-batches only
  train_loader_ = std::make_unique<data::DataLoader>(data_.train, elastic_sampler_, options);
  const uint64_t epoch = static_cast<uint64_t>(step_ / steps_per_epoch_);
  return train_loader_->Reset(epoch, elastic_sampler_->PositionOfStep(step_ % steps_per_epoch_));
}

bool Trainer::CanRegroup() const { return elastic_ && options_.regroup && group_failed_; }

Status Trainer::CollectiveResult(Status s) {
  if (!s.ok()) group_failed_ = true;
  return s;
}

Status Trainer::JoinElasticGroup() {
  group_failed_ = false;
  const std::shared_ptr<dist::ProcessGroup>& group = options_.process_group;
  rank_ = group->rank();
  world_size_ = group->size();
  applied_step_ = std::max(applied_step_, step_);
  StatusOr<StateSource> source = ChooseStateSource(*group, applied_step_);
  RETURN_IF_ERROR(CollectiveResult(source.status()));
  NamedTensorList state;
  if (rank_ == source->rank) {
    for (auto& [name, t] : model_->StateDict()) state.emplace_back(kModelPrefix + name, t);
    ASSIGN_OR_RETURN(std::vector<optim::NamedTensor> optimizer, update_->StateDict(true));
    for (auto& [name, t] : optimizer) state.emplace_back(kOptimizerPrefix + name, t);
  }
  RETURN_IF_ERROR(CollectiveResult(BroadcastTensors(*group, source->rank, &state)));
  if (rank_ != source->rank) {
    nn::NamedTensors weights;
    std::vector<optim::NamedTensor> optimizer;
    for (auto& [name, t] : state) {
      std::string key = name;
      if (TakePrefix(&key, kModelPrefix)) weights.emplace_back(key, t);
      if (TakePrefix(&key, kOptimizerPrefix)) optimizer.emplace_back(key, t);
    }
    const std::string from = "rank " + std::to_string(source->rank) + "'s live state";
    Status s = model_->LoadStateDict(weights, /*strict=*/true);
    if (!s.ok()) return s.WithContext("taking " + from);
    RETURN_IF_ERROR(update_->LoadStateDict(std::move(optimizer), from));
  }
  step_ = applied_step_ = source->step;
  if (options_.progress) options_.progress->step.store(step_);
  // The weights are equal everywhere now: no broadcast from rank 0 (BroadcastWeightsFromRank0).
  ASSIGN_OR_RETURN(dp_, DataParallel::Create(group, spec_.parallelism, *model_));
  RETURN_IF_ERROR(update_->Start(dp_.get()));
  RETURN_IF_ERROR(MakeElasticLoader());
  MakeEvalLoader();
  if (rank_ != 0) metrics_log_.reset();
  if (rank_ == 0 && !metrics_log_) RETURN_IF_ERROR(OpenMetricsLog(spec_.checkpoint.dir));
  return OkStatus();
}

Status Trainer::Regroup(const Status& why) {
  // An asynchronous write in flight commits (or is refused) before this rank leaves its group:
  // the next group's rank 0 may be another process writing the same directory.
  RETURN_IF_ERROR(CollectCheckpoint(/*wait=*/true));
  Status cause = why;
  for (int tries = 1;; ++tries) {
    SetPhase(Phase::kRegroup);
    TY_LOG(WARNING) << "rank " << rank_ << " of " << world_size_ << ": regrouping after step "
                    << step_ << (cause.ok() ? " (members join)" : ": " + cause.message());
    // The abandoned step's gradients go; nothing more runs in the old group.
    model_->ZeroGrad();
    regroup_agreed_ = false;
    std::shared_ptr<dist::ProcessGroup> old = std::move(options_.process_group);
    if (!cause.ok()) old->Abort(cause);
    dp_.reset();
    dist::RetireProcessGroup(std::move(old));
    StatusOr<TrainerOptions::NextGroup> next = options_.regroup(cause);
    if (!next.ok()) {
      return next.status().WithContext("rank " + std::to_string(rank_) + " regrouping after step " +
                                       std::to_string(step_));
    }
    options_.process_group = next->group;
    if (next->attempt != attempt_ && checkpoints_) {
      writer_.reset();  // it wrote through the manager replaced here, and has nothing in flight
      attempt_ = next->attempt;
      checkpoints_ = std::make_unique<CheckpointManager>(
          spec_.checkpoint.dir, spec_.checkpoint.keep_last, options_.clock, attempt_);
      if (next->group->rank() == 0) RETURN_IF_ERROR(checkpoints_->RaiseFence());
    }
    attempt_ = next->attempt;
    Status joined = JoinElasticGroup();
    if (joined.ok()) OpenCheckpointWriter();  // rank 0 of the new group writes
    if (joined.ok() || !group_failed_ || tries == kMaxRegroupTries) return joined;
    cause = joined;
  }
}

}  // namespace trainyard::trainer
