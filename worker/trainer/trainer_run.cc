// Trainer's training loop (trainer.h): Run repeats Step until the step count or a stop; a step
// is its micro-batches' forward and backward, the UpdateStep of the spec's mode, one wait for
// the device, the ranks' agreement and the step's report. Evaluate runs the held-out split.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <numeric>

#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/loss.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/tensor/storage.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Losses averaged for TrainSummary::final_train_loss.
constexpr size_t kFinalLossWindow = 50;

}  // namespace

struct Trainer::RunTally {
  SteadyClock::time_point start = SteadyClock::now();
  TrainSummary summary;
  std::deque<double> recent_losses;  // the last kFinalLossWindow steps'
  int64_t samples = 0;               // over this run's steps
  int64_t last_eval_step = -1;

  void Add(const StepMetrics& m) {
    samples += m.samples;
    ++summary.steps_this_run;
    summary.skipped_steps += m.skipped;
    recent_losses.push_back(m.loss);
    if (recent_losses.size() > kFinalLossWindow) recent_losses.pop_front();
  }
};

StatusOr<std::optional<EvalMetrics>> Trainer::EvaluateOnRank0(bool gathered) {
  const bool gather = pipe_ && !gathered;  // rank 0 evaluates the whole model
  if (gather) RETURN_IF_ERROR(pipe_->Gather());
  if (!eval_loader_) return std::optional<EvalMetrics>();
  StatusOr<EvalMetrics> m = Evaluate();
  if (gather) pipe_->Release();
  if (dp_) RETURN_IF_ERROR(dp_->TakeGatherError());
  RETURN_IF_ERROR(m.status());
  if (rank_ != 0) return std::optional<EvalMetrics>();  // ZeRO-3's other ranks
  return std::optional<EvalMetrics>(*m);
}

StatusOr<EvalMetrics> Trainer::Evaluate() {
  if (!eval_loader_)
    return FailedPreconditionError("this job's data holds nothing out for evaluation");
  if (pipe_ && !pipe_->whole()) {
    return FailedPreconditionError(
        "this rank holds one pipeline stage's weights; rank 0 evaluates once it has gathered the "
        "whole model (during and after Run)");
  }
  const auto start = SteadyClock::now();
  SetPhase(Phase::kEvaluate);
  const bool was_training = model_->is_training();
  model_->Eval();
  autograd::NoGradGuard no_grad;
  RETURN_IF_ERROR(eval_loader_->Reset(0, 0));
  double loss_sum = 0;
  int64_t correct = 0, count = 0, batches = 0;
  Status status;
  while (spec_.eval.max_batches == 0 || batches < spec_.eval.max_batches) {
    StatusOr<std::optional<data::Batch>> next = eval_loader_->Next(options_.data_timeout);
    if (!next.ok()) {
      status = next.status();
      break;
    }
    if (!next->has_value()) break;
    const data::Batch batch = OnDevice(**next);
    Tensor target = ops::Contiguous(ops::Reshape(batch.target, {-1}));
    Tensor flat, loss;
    {
      AutocastGuard autocast(autocast_dtype_);  // as in training (Note [Mixed precision])
      Tensor logits = model_->Call(batch.input);
      flat = ops::Reshape(logits, {-1, logits.size(-1)});
      loss = ops::CrossEntropy(flat, target);
    }
    const int64_t n = target.numel();
    loss_sum += loss.item() * static_cast<double>(n);
    const std::vector<int64_t> p = ToVector<int64_t>(ops::Argmax(flat, 1));
    const std::vector<int64_t> t = ToVector<int64_t>(target);
    for (int64_t i = 0; i < n; ++i) correct += p[i] == t[i];
    count += n;
    ++batches;
  }
  model_->Train(was_training);
  RETURN_IF_ERROR(status);
  EvalMetrics m;
  m.step = step_;
  m.loss = count > 0 ? loss_sum / static_cast<double>(count) : std::nan("");
  m.accuracy = count > 0 ? static_cast<double>(correct) / static_cast<double>(count) : std::nan("");
  m.samples = count / data_.tokens_per_sample;
  m.seconds = SecondsSince(start);
  if (options_.on_eval && rank_ == 0) options_.on_eval(m);
  if (metrics_log_) RETURN_IF_ERROR(metrics_log_->Eval(m));
  return m;
}

StatusOr<TrainSummary> Trainer::Run() {
  RunTally tally;
  tally.summary.name = spec_.name;
  tally.summary.total_steps = total_steps_;
  tally.summary.resumed_from = resumed_from_;
  model_->Train();
  ResetMemoryPeak(device_);  // each step's peak covers the time since the previous report
  while (step_ < total_steps_) {
    StatusOr<bool> stop = Step(&tally);
    if (!stop.ok() && CanRegroup()) {
      // Note [Elastic training]: the step in flight is abandoned.
      RETURN_IF_ERROR(Regroup(stop.status()));
      continue;
    }
    if (!stop.ok()) return stop.status();
    if (*stop && step_ < total_steps_) {
      tally.summary.interrupted = true;
      break;
    }
    if (regroup_agreed_ && step_ < total_steps_) RETURN_IF_ERROR(Regroup(OkStatus()));
  }
  return Finish(&tally);
}

StatusOr<bool> Trainer::Step(RunTally* tally) {
  const auto start = SteadyClock::now();
  StepMetrics m;
  std::optional<bool> agreed_stop;
  RETURN_IF_ERROR(TrainStep(&m, &agreed_stop));
  ++step_;
  if (options_.progress) options_.progress->step.store(step_);
  Finalize(start, &m);
  tally->Add(m);
  if (options_.on_step) options_.on_step(m);
  if (metrics_log_) RETURN_IF_ERROR(metrics_log_->Step(m));
  // Read after on_step: a request made while reporting this step stops the run here.
  const bool stop = agreed_stop ? *agreed_stop : StopRequested();
  RETURN_IF_ERROR(EvaluateOrSave(stop, tally));
  RETURN_IF_ERROR(CollectCheckpoint(/*wait=*/false));  // a background write that has ended
  return stop;
}

Status Trainer::TrainStep(StepMetrics* m, std::optional<bool>* agreed_stop) {
  m->world_size = world_size_;
  m->lr = schedule_->LrAt(step_);
  update_->SetLr(m->lr);
  timer_->Clear();
  spans_.clear();
  Tensor loss_sum, grad_norm;
  RETURN_IF_ERROR(ForwardBackward(m, &loss_sum));
  RETURN_IF_ERROR(OptimizerStep(m, &grad_norm));
  // The step's wait for the device (on a GPU, forward, backward, clipping and the update
  // above were only queued; the fp16 scaler, ZeRO's clipping and data parallelism's buckets
  // wait earlier). The update is applied before the loss is seen: a non-finite one fails the
  // job just below, before anything is saved.
  SetPhase(Phase::kDeviceWait);
  // Elastic: this rank's sum, divided by the step's micro-batches once summed over ranks.
  m->loss = loss_sum.item() / (elastic_ ? 1.0 : static_cast<double>(StepMicroBatches()));
  if (grad_norm.defined()) m->grad_norm = grad_norm.item();  // computed by now: no wait
  for (const auto& [seconds, from, to] : spans_) m->*seconds += timer_->Seconds(from, to);
  ASSIGN_OR_RETURN(*agreed_stop, AgreeOnStep(m));
  if (!std::isfinite(m->loss)) {
    return FailedPreconditionError("training diverged: the loss is " + std::to_string(m->loss) +
                                   " at step " + std::to_string(step_ + 1) +
                                   " (lower the learning rate or set grad_clip_norm)");
  }
  return OkStatus();
}

Status Trainer::ForwardBackward(StepMetrics* m, Tensor* loss_sum) {
  if (pipe_) return PipelineForwardBackward(m, loss_sum);
  const int64_t micro_batches = RankMicroBatches();
  for (int64_t micro = 1; micro <= micro_batches; ++micro) {
    ASSIGN_OR_RETURN(const data::Batch batch, NextBatch(m));
    if (elastic_) SeedMicroBatch(micro - 1);
    RETURN_IF_ERROR(MicroBatch(batch, /*last=*/micro == micro_batches, loss_sum));
  }
  // Every rank counts the whole step's samples (the ranks' micro-batches are all full).
  if (elastic_) m->samples = spec_.batch_size * StepMicroBatches();
  if (dp_) {
    const dist::ReducerStats& stats = dp_->reducer().stats();
    m->allreduce_seconds = stats.comm_seconds;
    m->bus_bandwidth = stats.bus_bandwidth;
  }
  return OkStatus();
}

StatusOr<data::Batch> Trainer::NextBatch(StepMetrics* m) {
  while (true) {
    const auto start = SteadyClock::now();
    SetPhase(Phase::kData);
    StatusOr<std::optional<data::Batch>> next = train_loader_->Next(options_.data_timeout);
    if (!next.ok()) return next.status();
    if (!next->has_value()) {  // the epoch is over
      RETURN_IF_ERROR(train_loader_->Reset(train_loader_->epoch() + 1, 0));
      continue;
    }
    data::Batch batch = OnDevice(**next);
    m->epoch = static_cast<int64_t>(train_loader_->epoch());
    // Elastic: ForwardBackward counts the step's samples.
    m->samples += batch.input.size(0) * DataWorld();
    m->data_seconds += SecondsSince(start);
    return batch;
  }
}

Status Trainer::MicroBatch(const data::Batch& batch, bool last, Tensor* loss_sum) {
  SetPhase(Phase::kForward);
  const int forward_start = timer_->Mark();
  // The step's gradient is the mean over its micro-batches (and, by the reducer, ranks).
  Tensor loss = ForwardLoss(batch.input, batch.target);
  {
    // Summed on the device: reading it here would make the host wait for the forward.
    autograd::NoGradGuard no_grad;
    *loss_sum = loss_sum->defined() ? ops::Add(*loss_sum, loss.detach()) : loss.detach();
  }
  // The reducer averages over the world_size_ ranks: each of the step's micro-batches weighs
  // 1 / StepMicroBatches() in the end, however many of them this rank took.
  const double weight = static_cast<double>(elastic_ ? world_size_ : 1) / StepMicroBatches();
  if (weight != 1.0) loss = ops::MulScalar(loss, weight);
  loss = update_->ScaleLoss(loss);

  SetPhase(Phase::kBackward);
  const int backward_start = timer_->Mark();
  spans_.emplace_back(&StepMetrics::forward_seconds, forward_start, backward_start);
  if (dp_) dp_->BeforeBackward(/*sync=*/last);
  RETURN_IF_ERROR(autograd::Backward(loss));
  loss = Tensor();
  const int backward_end = timer_->Mark();
  if (dp_) {
    SetPhase(Phase::kAllReduceWait);
    RETURN_IF_ERROR(CollectiveResult(dp_->AfterBackward()));
  }
  // Backward includes the wait for the buckets, which is also reported apart, on the same
  // clock: on a GPU the stream's idle time from backward's end until the buckets are in.
  const int waited = timer_->Mark();
  spans_.emplace_back(&StepMetrics::backward_seconds, backward_start, waited);
  if (dp_) spans_.emplace_back(&StepMetrics::bucket_wait_seconds, backward_end, waited);
  return OkStatus();
}

bool Trainer::StopRequested() const { return options_.stop != nullptr && options_.stop->load(); }

Status Trainer::OptimizerStep(StepMetrics* m, Tensor* grad_norm) {
  SetPhase(Phase::kOptimizer);
  const int start = timer_->Mark();
  double pipeline_norm = std::nan("");
  if (pipe_) {  // Note [Pipeline stages]: the tied embedding's sum, the whole model's norm
    RETURN_IF_ERROR(pipe_->SumTiedGradients());
    ASSIGN_OR_RETURN(pipeline_norm, pipe_->ClipGradients(spec_.grad_clip_norm));
  }
  ASSIGN_OR_RETURN(UpdateReport update, update_->Apply());
  applied_step_ = step_ + 1;  // Note [Elastic training]: this rank's weights are past step_
  m->grad_norm = pipe_ ? pipeline_norm : update.grad_norm;
  m->loss_scale = update.loss_scale;
  m->skipped = update.skipped;
  *grad_norm = std::move(update.device_grad_norm);
  spans_.emplace_back(&StepMetrics::optimizer_seconds, start, timer_->Mark());
  return OkStatus();
}

StatusOr<std::optional<bool>> Trainer::AgreeOnStep(StepMetrics* m) {
  // Ranks must stop at the same step: with data parallelism the request counts once every
  // rank has seen it through the step's agreement.
  if (pipe_) {
    SetPhase(Phase::kAllReduceWait);
    ASSIGN_OR_RETURN(PipelineStage::Agreement agreed, pipe_->AgreeOnStep(m->loss, StopRequested()));
    m->loss = agreed.loss;
    return std::optional<bool>(agreed.stop);
  }
  if (!dp_) return std::optional<bool>();
  SetPhase(Phase::kAllReduceWait);
  const bool regroup = options_.regroup_requested != nullptr && options_.regroup_requested->load();
  StatusOr<DataParallel::Agreement> agreed = dp_->AgreeOnStep(m->loss, StopRequested(), regroup);
  RETURN_IF_ERROR(CollectiveResult(agreed.status()));
  m->loss =
      elastic_ ? agreed->loss_sum / static_cast<double>(StepMicroBatches()) : agreed->mean_loss;
  regroup_agreed_ = agreed->regroup;
  return std::optional<bool>(agreed->stop);
}

void Trainer::Finalize(SteadyClock::time_point start, StepMetrics* m) {
  m->step = step_;
  m->total_steps = total_steps_;
  m->tokens = m->samples * data_.tokens_per_sample;
  const double seconds = SecondsSince(start);
  m->samples_per_second = static_cast<double>(m->samples) / seconds;
  m->tokens_per_second = static_cast<double>(m->tokens) / seconds;
  m->memory = DeviceMemoryStats(device_);
  ResetMemoryPeak(device_);
}

Status Trainer::EvaluateOrSave(bool stop, RunTally* tally) {
  if (data_.eval && spec_.eval.every_steps > 0 && step_ % spec_.eval.every_steps == 0 &&
      step_ < total_steps_) {
    ASSIGN_OR_RETURN(tally->summary.eval, EvaluateOnRank0());
    tally->last_eval_step = step_;
  }
  if (checkpoints_ && spec_.checkpoint.every_steps > 0 &&
      step_ % spec_.checkpoint.every_steps == 0 && !stop) {
    RETURN_IF_ERROR(SaveCheckpoint());
  }
  return OkStatus();
}

StatusOr<TrainSummary> Trainer::Finish(RunTally* tally) {
  TrainSummary& summary = tally->summary;
  // Checkpoint first: with ZeRO it is a collective, which must not wait on rank 0's evaluation.
  if (checkpoints_ && saved_step_ != step_) RETURN_IF_ERROR(SaveCheckpoint());
  // With pipeline stages rank 0 gathers the whole model once, for the last evaluation and for
  // whoever reads the model after Run; the other ranks need not wait for the evaluation.
  if (pipe_) RETURN_IF_ERROR(pipe_->Gather());
  if (!summary.interrupted && data_.eval && tally->last_eval_step != step_) {
    ASSIGN_OR_RETURN(summary.eval, EvaluateOnRank0(/*gathered=*/pipe_ != nullptr));
  }
  // An asynchronous checkpoint's write overlaps the evaluation; Run returns once it commits.
  RETURN_IF_ERROR(CollectCheckpoint(/*wait=*/true));
  // ZeRO-3: the model is whole again for whoever reads it after Run.
  if (dp_) RETURN_IF_ERROR(dp_->Unshard());
  SetPhase(Phase::kDone);
  summary.steps = step_;
  summary.world_size = world_size_;
  summary.optimizer_state_bytes = optimizer_state_bytes();
  summary.gradient_bytes = gradient_bytes();
  summary.weight_bytes = weight_bytes();
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) == 0) summary.peak_resident_bytes = usage.ru_maxrss * 1024;
  summary.checkpoint = last_checkpoint_;
  summary.seconds = SecondsSince(tally->start);
  const std::deque<double>& losses = tally->recent_losses;
  summary.final_train_loss = losses.empty() ? std::nan("")
                                            : std::accumulate(losses.begin(), losses.end(), 0.0) /
                                                  static_cast<double>(losses.size());
  summary.samples_per_second = static_cast<double>(tally->samples) / summary.seconds;
  summary.tokens_per_second =
      summary.samples_per_second * static_cast<double>(data_.tokens_per_sample);
  return std::move(summary);
}

}  // namespace trainyard::trainer
