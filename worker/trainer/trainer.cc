#include "worker/trainer/trainer.h"

#include <chrono>
#include <filesystem>

#include "common/durable_file.h"
#include "kernels/cpu/parallel.h"
#include "worker/autograd/autocast.h"
#include "worker/data/device_copier.h"
#include "worker/data/sampler.h"
#include "worker/nn/graph.h"
#include "worker/nn/zoo.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/storage.h"

namespace trainyard::trainer {
namespace {

using SteadyClock = std::chrono::steady_clock;

// spec.precision's autocast dtype; kFloat32 (off) for "fp32".
DType AutocastDTypeOf(const std::string& precision) {
  if (precision == "bf16") return DType::kBFloat16;
  if (precision == "fp16") return DType::kFloat16;
  return DType::kFloat32;
}

nn::ModelConfigs ModelConfigsOf(const spec::ModelSpec& m, int64_t data_vocab) {
  nn::ModelConfigs c;
  c.mlp.sizes = m.mlp.sizes;
  c.mlp.activation = m.mlp.activation;
  c.mlp.dropout = m.mlp.dropout;
  c.cnn = {m.cnn.in_channels, m.cnn.image_size, m.cnn.num_classes, m.cnn.channels1,
           m.cnn.channels2,   m.cnn.hidden,     m.cnn.dropout};
  c.resnet.in_channels = m.resnet.in_channels;
  c.resnet.num_classes = m.resnet.num_classes;
  c.resnet.base_width = m.resnet.base_width;
  c.resnet.blocks = m.resnet.blocks;
  c.gpt.vocab_size = m.gpt.vocab_size > 0 ? m.gpt.vocab_size : data_vocab;
  c.gpt.context = m.gpt.context;
  c.gpt.n_layer = m.gpt.n_layer;
  c.gpt.n_head = m.gpt.n_head;
  c.gpt.n_embd = m.gpt.n_embd;
  c.gpt.dropout = m.gpt.dropout;
  c.gpt.bias = m.gpt.bias;
  return c;
}

StatusOr<std::unique_ptr<optim::LrSchedule>> MakeSchedule(const spec::JobSpec& spec,
                                                          int64_t total_steps) {
  const double lr = spec.optimizer.lr();
  const spec::ScheduleSpec& s = spec.schedule;
  if (s.kind == "step") {
    ASSIGN_OR_RETURN(auto sched, optim::StepSchedule::Create(lr, s.step.step_size, s.step.gamma));
    return std::unique_ptr<optim::LrSchedule>(std::move(sched));
  }
  if (s.kind == "cosine") {
    const int64_t total = s.cosine.total_steps > 0 ? s.cosine.total_steps : total_steps;
    if (total <= s.cosine.warmup_steps) {
      return InvalidArgumentError(
          "schedule.cosine.warmup_steps = " + std::to_string(s.cosine.warmup_steps) +
          ": must be less than the run's " + std::to_string(total) + " steps");
    }
    ASSIGN_OR_RETURN(auto sched, optim::CosineSchedule::Create(lr, s.cosine.warmup_steps, total,
                                                               s.cosine.min_lr));
    return std::unique_ptr<optim::LrSchedule>(std::move(sched));
  }
  ASSIGN_OR_RETURN(auto sched, optim::ConstantSchedule::Create(lr));
  return std::unique_ptr<optim::LrSchedule>(std::move(sched));
}

// spec.num_threads kernel threads (process-wide) when it is > 0.
Status SetKernelThreads(int num_threads) {
  if (num_threads <= 0) return OkStatus();
  const int started = kernels::cpu::SetNumThreads(num_threads);
  if (started >= num_threads) return OkStatus();
  return ResourceExhaustedError("num_threads = " + std::to_string(num_threads) +
                                ": the system let this process "
                                "start only " +
                                std::to_string(started) +
                                " threads (a task or RLIMIT_NPROC limit); set "
                                "num_threads to " +
                                std::to_string(started) + " or fewer");
}

// Whether a file or directory exists at `path`.
bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

Trainer::Trainer(spec::JobSpec spec, TrainerOptions options)
    : spec_(std::move(spec)), options_(std::move(options)), gen_(spec_.seed) {}

Trainer::~Trainer() = default;

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(spec::JobSpec spec, TrainerOptions options) {
  std::unique_ptr<Trainer> trainer(new Trainer(std::move(spec), std::move(options)));
  RETURN_IF_ERROR(trainer->Init());
  return trainer;
}

Status Trainer::Init() {
  RETURN_IF_ERROR(SetKernelThreads(spec_.num_threads));
  autocast_dtype_ = AutocastDTypeOf(spec_.precision);
  // Before the data loads, as the step is made after the model.
  RETURN_IF_ERROR(ValidateUpdateStep(spec_, options_.grad_scaler));
  if (options_.process_group) {
    rank_ = options_.process_group->rank();
    world_size_ = options_.process_group->size();
    elastic_ = spec::IsElastic(spec_.parallelism);
  }
  RETURN_IF_ERROR(ChooseDevice());
  timer_ = std::make_unique<StreamTimer>(device_);
  ASSIGN_OR_RETURN(const bool vocabulary_saved, LoadData());
  RETURN_IF_ERROR(BuildModel());
  RETURN_IF_ERROR(MakeLoaders());
  ASSIGN_OR_RETURN(schedule_, MakeSchedule(spec_, total_steps_));
  attempt_ = options_.attempt;
  RETURN_IF_ERROR(OpenCheckpointDir(/*save_vocabulary=*/!vocabulary_saved));
  RETURN_IF_ERROR(Restore());
  RETURN_IF_ERROR(OpenMetricsLog(spec_.checkpoint.dir));
  return StartDataParallel();
}

std::string Trainer::VocabularyPath() const {
  const std::string& dir = spec_.checkpoint.dir;
  return dir.empty() ? "" : dir + "/" + kVocabularyFile;
}

StatusOr<bool> Trainer::LoadData() {
  // A text run keeps the vocabulary saved beside its checkpoints, so token ids never change.
  std::optional<data::Vocabulary> saved_vocabulary;
  const std::string vocabulary_path = VocabularyPath();
  if (spec_.data.source == "text" && !vocabulary_path.empty() && spec_.checkpoint.resume &&
      Exists(vocabulary_path)) {
    StatusOr<data::Vocabulary> v = data::Vocabulary::Load(vocabulary_path);
    if (!v.ok())
      return Status(v.status().code(), "checkpoint.dir: " + std::string(v.status().message()));
    saved_vocabulary = std::move(v).value();
  }
  ASSIGN_OR_RETURN(data_, LoadJobData(spec_, saved_vocabulary ? &*saved_vocabulary : nullptr));
  return saved_vocabulary.has_value();
}

Status Trainer::BuildModel() {
  const int64_t vocab = spec_.model.arch == "gpt"     ? spec_.model.gpt.vocab_size
                        : spec_.model.arch == "llama" ? spec_.model.llama.vocab_size
                                                      : 0;
  if (vocab > 0 && vocab < data_.num_classes) {
    return InvalidArgumentError("model." + spec_.model.arch + ".vocab_size = " +
                                std::to_string(vocab) + ": smaller than the data's vocabulary of " +
                                std::to_string(data_.num_classes) + " tokens (0 takes the data's)");
  }
  if (std::optional<spec::GraphSpec> graph = spec::ModelGraph(spec_.model, data_.num_classes)) {
    ASSIGN_OR_RETURN(model_, nn::BuildGraph(*graph, &gen_));
    RETURN_IF_ERROR(CheckGraphClasses());
  } else {
    nn::ModelConfigs configs = ModelConfigsOf(spec_.model, data_.num_classes);
    configs.gpt.activation_checkpointing = spec_.parallelism.activation_checkpointing;
    ASSIGN_OR_RETURN(model_, nn::BuildModel(spec_.model.arch, configs, &gen_));
  }
  // Built (and initialised from the seed) on the CPU, so every device starts from the same
  // weights; then moved, before the optimizer takes its handles.
  RETURN_IF_ERROR(model_->To(device_));
  for (const Tensor& p : model_->Parameters()) num_parameters_ += p.numel();
  if (spec_.parallelism.pipeline_stages > 1) {
    // Each stage updates its own parameters and clips by the whole model's norm itself.
    ASSIGN_OR_RETURN(
        pipe_, PipelineStage::Create(spec_, options_.pipeline, options_.process_group, *model_));
    spec::JobSpec stage_spec = spec_;
    stage_spec.grad_clip_norm = 0;
    ASSIGN_OR_RETURN(update_, MakeUpdateStep(stage_spec, options_.grad_scaler, pipe_->parameters(),
                                             /*data_parallel=*/pipe_->groups().data != nullptr));
    return OkStatus();
  }
  ASSIGN_OR_RETURN(update_, MakeUpdateStep(spec_, options_.grad_scaler, *model_,
                                           /*data_parallel=*/options_.process_group != nullptr));
  return OkStatus();
}

Status Trainer::CheckGraphClasses() const {
  const spec::CompiledGraph& g = static_cast<const nn::GraphModel&>(*model_).graph();
  for (const spec::GraphOp& op : g.ops) {
    // Token ids reach embeddings only (position embeddings read no ids).
    if (op.node.op == "embedding" && op.node.num_embeddings < data_.num_classes) {
      return InvalidArgumentError(
          op.where + ".num_embeddings = " + std::to_string(op.node.num_embeddings) +
          ": fewer than the data's " + std::to_string(data_.num_classes) + " tokens");
    }
  }
  const int64_t classes = g.shape_of(g.output).dims.back();
  if (classes < data_.num_classes) {
    return InvalidArgumentError("model.graph: the output " + g.shape_of(g.output).ToString() +
                                " has " + std::to_string(classes) +
                                " classes, fewer than the data's " +
                                std::to_string(data_.num_classes) +
                                (spec::SequenceLength(spec_.model) > 0 ? " tokens" : " classes"));
  }
  return OkStatus();
}

void Trainer::OpenCheckpointWriter() {
  if (rank_ == 0 && checkpoints_ && spec_.checkpoint.async && !writer_) {
    writer_ = std::make_unique<AsyncCheckpointWriter>(checkpoints_.get());
  }
}

Status Trainer::OpenCheckpointDir(bool save_vocabulary) {
  const std::string& dir = spec_.checkpoint.dir;
  if (dir.empty()) return OkStatus();
  checkpoints_ = std::make_unique<CheckpointManager>(dir, spec_.checkpoint.keep_last,
                                                     options_.clock, options_.attempt);
  // Before anything is resumed or written: a stale attempt stops here.
  if (rank_ == 0) RETURN_IF_ERROR(checkpoints_->RaiseFence());
  OpenCheckpointWriter();
  if (!data_.vocabulary || !save_vocabulary || rank_ != 0) return OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgumentError("checkpoint.dir: cannot create " + dir + ": " + ec.message());
  // Written whole or not at all (WriteFileAtomically), like the checkpoints.
  return data_.vocabulary->Save(VocabularyPath());
}

Status Trainer::OpenMetricsLog(const std::string& checkpoint_dir) {
  if (rank_ != 0) return OkStatus();
  const bool own_file = !options_.metrics_file.empty();
  if (!own_file && checkpoint_dir.empty()) return OkStatus();
  if (!own_file) {
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_dir, ec);
    if (ec) {
      return InvalidArgumentError("checkpoint.dir: cannot create " + checkpoint_dir + ": " +
                                  ec.message());
    }
  }
  const std::string path = own_file ? options_.metrics_file : checkpoint_dir + "/" + kMetricsFile;
  StatusOr<std::unique_ptr<MetricsLog>> log = MetricsLog::Open(path, step_);
  if (!log.ok()) return log.status().WithContext(own_file ? "--metrics-file" : "checkpoint.dir");
  metrics_log_ = *std::move(log);
  return OkStatus();
}

Status Trainer::ChooseDevice() {
  if (spec_.device == "cpu") return OkStatus();
  // One GPU per rank: cuda:(rank % visible GPUs), as NcclProcessGroup chooses. A rank of the
  // service sees only its slot's GPU (CUDA_VISIBLE_DEVICES), so that is cuda:0.
  StatusOr<cuda::Backend*> backend = LoadCudaBackend();
  if (!backend.ok()) {
    return Status(backend.status().code(), "device = \"cuda\": " + backend.status().message());
  }
  const int count = (*backend)->DeviceCount();
  if (count == 0) {
    return FailedPreconditionError("device = \"cuda\": no CUDA device is visible to rank " +
                                   std::to_string(rank_) +
                                   "; run the job on a GPU worker or use device \"cpu\"");
  }
  device_ = Device::Cuda(rank_ % count);
  RETURN_IF_ERROR(CheckDeviceAvailable(device_));
  RETURN_IF_ERROR((*backend)->SetDevice(device_.index));
  copier_ = std::make_unique<data::DeviceCopier>(device_);
  return OkStatus();
}

data::Batch Trainer::OnDevice(const data::Batch& batch) {
  return copier_ ? copier_->ToDevice(batch) : batch;
}

Status Trainer::MakeLoaders() {
  if (elastic_) {  // the train loader: JoinElasticGroup, once the group's step is known
    RETURN_IF_ERROR(ElasticStepsPerEpoch());
    total_steps_ = spec_.steps > 0 ? spec_.steps : spec_.epochs * steps_per_epoch_;
    MakeEvalLoader();
    return OkStatus();
  }
  const int64_t n = data_.train->size();
  const int64_t batch = spec_.batch_size;
  std::shared_ptr<const data::Sampler> sampler;
  if (DataWorld() > 1) {
    ASSIGN_OR_RETURN(sampler, data::DistributedSampler::Create(n, DataRank(), DataWorld(),
                                                               spec_.data.shuffle, spec_.seed));
  } else if (spec_.data.shuffle) {
    sampler = std::make_shared<data::RandomSampler>(n, spec_.seed);
  } else {
    sampler = std::make_shared<data::SequentialSampler>(n);
  }
  // Each rank's shard has sampler->size() samples; a step takes grad_accumulation_steps
  // micro-batches of batch_size from it.
  const int64_t shard = sampler->size();
  shard_size_ = shard;
  const int64_t micro = spec_.data.drop_last ? shard / batch : (shard + batch - 1) / batch;
  steps_per_epoch_ = micro / spec_.parallelism.grad_accumulation_steps;
  if (steps_per_epoch_ == 0) {
    return InvalidArgumentError(
        "batch_size = " + std::to_string(batch) + " x parallelism.grad_accumulation_steps = " +
        std::to_string(spec_.parallelism.grad_accumulation_steps) + ": more than the " +
        std::to_string(shard) + " training samples each of the " + std::to_string(DataWorld()) +
        " data-parallel rank(s) has per epoch");
  }
  total_steps_ = spec_.steps > 0 ? spec_.steps : spec_.epochs * steps_per_epoch_;
  train_loader_ = std::make_unique<data::DataLoader>(data_.train, sampler, LoaderOptions());
  MakeEvalLoader();
  return OkStatus();
}

data::DataLoaderOptions Trainer::LoaderOptions() const {
  data::DataLoaderOptions loader;
  loader.batch_size = spec_.batch_size;
  loader.drop_last = spec_.data.drop_last;
  loader.num_workers = spec_.data.num_workers;
  loader.prefetch = spec_.data.prefetch;
  return loader;
}

void Trainer::MakeEvalLoader() {
  // ZeRO-3's ranks evaluate together: each unit's weights are gathered as it runs.
  const bool every_rank = spec_.parallelism.zero_stage == 3 && world_size_ > 1;
  if (!data_.eval || (rank_ != 0 && !every_rank)) {
    eval_loader_.reset();
    return;
  }
  if (eval_loader_) return;
  data::DataLoaderOptions eval = LoaderOptions();
  eval.batch_size = spec_.eval.batch_size > 0 ? spec_.eval.batch_size : spec_.batch_size;
  eval.drop_last = false;
  eval_loader_ = std::make_unique<data::DataLoader>(
      data_.eval, std::make_shared<data::SequentialSampler>(data_.eval->size()), eval);
}

// Rank r > 0 draws dropout from its own stream: the model generator's seed moved by r.
constexpr uint64_t kRankSeedStride = 0x9E3779B97F4A7C15ull;

Status Trainer::StartDataParallel() {
  if (elastic_) return JoinElasticGroup();
  if (world_size_ > 1) {
    gen_.SetState(gen_.seed() + kRankSeedStride * static_cast<uint64_t>(rank_), gen_.offset());
  }
  if (pipe_) {
    // Every stage's copy of the model starts as rank 0's; a stage's replicas average its
    // gradients (Note [Pipeline stages]).
    RETURN_IF_ERROR(CheckSameStep(*options_.process_group, step_, pipe_->device()));
    RETURN_IF_ERROR(BroadcastWeightsFromRank0(*options_.process_group, *model_));
    pipe_->Release();  // each rank keeps its stage's weights
    if (pipe_->groups().data) {
      spec::ParallelismSpec stage = spec_.parallelism;
      stage.world_size = pipe_->groups().replicas;
      ASSIGN_OR_RETURN(dp_, DataParallel::Create(pipe_->groups().data, stage, pipe_->parameters()));
    }
  } else if (options_.process_group) {
    RETURN_IF_ERROR(BroadcastWeightsFromRank0(*options_.process_group, *model_));
    ASSIGN_OR_RETURN(dp_, DataParallel::Create(options_.process_group, spec_.parallelism, *model_));
    RETURN_IF_ERROR(dp_->CheckSameStep(step_));
  }
  return update_->Start(dp_.get());
}

int64_t Trainer::optimizer_state_bytes() const { return update_->state_bytes(); }

int64_t Trainer::weight_bytes() const {
  if (pipe_) return pipe_->weight_bytes();
  if (dp_) return dp_->weight_bytes();
  int64_t bytes = 0;
  for (const Tensor& p : model_->Parameters()) bytes += dist::BytesOf(p);
  return bytes;
}

int64_t Trainer::gradient_bytes() const {
  if (dp_) return dp_->reducer().peak_gradient_bytes();
  if (!pipe_) return weight_bytes();
  int64_t bytes = 0;  // the stage's own gradients
  for (const Tensor& p : pipe_->parameters().Parameters()) bytes += dist::BytesOf(p);
  return bytes;
}

Tensor Trainer::ForwardLoss(const Tensor& input, const Tensor& target) const {
  AutocastGuard autocast(autocast_dtype_);
  Tensor output = model_->Call(input);
  // (N, C) logits and (N) labels, or (B, T, V) logits and (B, T) next tokens.
  return ops::CrossEntropy(ops::Reshape(output, {-1, output.size(-1)}), ops::Reshape(target, {-1}));
}

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting:
      return "starting";
    case Phase::kData:
      return "data";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kAllReduceWait:
      return "allreduce_wait";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kDeviceWait:
      return "device_wait";
    case Phase::kEvaluate:
      return "evaluate";
    case Phase::kCheckpoint:
      return "checkpoint";
    case Phase::kRegroup:
      return "regroup";
    case Phase::kDone:
      return "done";
  }
  return "unknown";
}

void Progress::Set(Phase p) {
  phase.store(static_cast<int>(p));
  phase_since_ns.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
          .count());
}

}  // namespace trainyard::trainer
