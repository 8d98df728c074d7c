#include "worker/trainer/trainer.h"

#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <numeric>

#include "common/durable_file.h"
#include "kernels/cpu/parallel.h"
#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/data/device_copier.h"
#include "worker/data/sampler.h"
#include "worker/nn/zoo.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/loss.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/optim/clip_grad.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/storage.h"

namespace trainyard::trainer {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// The model's place in the generators saved with a checkpoint (manifest.h).
// Losses averaged for TrainSummary::final_train_loss.
constexpr size_t kFinalLossWindow = 50;
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

StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const spec::OptimizerSpec& o,
                                                          std::vector<optim::NamedTensor> params) {
  if (o.kind == "sgd") {
    optim::SGDOptions s;
    s.lr = o.sgd.lr;
    s.momentum = o.sgd.momentum;
    s.dampening = o.sgd.dampening;
    s.nesterov = o.sgd.nesterov;
    s.weight_decay = o.sgd.weight_decay;
    ASSIGN_OR_RETURN(auto opt, optim::SGD::Create(std::move(params), s));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  }
  const spec::AdamSpec& a = o.kind == "adam" ? o.adam : o.adamw;
  if (o.kind == "adam") {
    optim::AdamOptions s{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay};
    ASSIGN_OR_RETURN(auto opt, optim::Adam::Create(std::move(params), s));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  }
  optim::AdamWOptions s{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay};
  ASSIGN_OR_RETURN(auto opt, optim::AdamW::Create(std::move(params), s));
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
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
  if (spec_.num_threads > 0) {
    const int started = kernels::cpu::SetNumThreads(spec_.num_threads);
    if (started < spec_.num_threads) {
      return ResourceExhaustedError("num_threads = " + std::to_string(spec_.num_threads) +
                                    ": the system let this process "
                                    "start only " +
                                    std::to_string(started) +
                                    " threads (a task or RLIMIT_NPROC limit); set "
                                    "num_threads to " +
                                    std::to_string(started) + " or fewer");
    }
  }
  autocast_dtype_ = AutocastDTypeOf(spec_.precision);
  if (spec_.precision == "fp16") {
    // ZeRO-1 leaves each rank gradient shards, which the scaler does not see.
    TY_CHECK(spec_.parallelism.zero_stage == 0) << "the job spec allowed fp16 with ZeRO-1";
    ASSIGN_OR_RETURN(scaler_, optim::GradScaler::Create(options_.grad_scaler));
  }
  if (options_.process_group) {
    rank_ = options_.process_group->rank();
    world_size_ = options_.process_group->size();
  }
  RETURN_IF_ERROR(ChooseDevice());
  timer_ = std::make_unique<StreamTimer>(device_);
  const std::string& dir = spec_.checkpoint.dir;
  const bool text = spec_.data.source == "text";

  // A text run keeps the vocabulary saved beside its checkpoints, so token ids never change.
  std::optional<data::Vocabulary> saved_vocabulary;
  const std::string vocabulary_path = dir.empty() ? "" : dir + "/" + kVocabularyFile;
  if (text && !dir.empty() && spec_.checkpoint.resume && Exists(vocabulary_path)) {
    StatusOr<data::Vocabulary> v = data::Vocabulary::Load(vocabulary_path);
    if (!v.ok())
      return Status(v.status().code(), "checkpoint.dir: " + std::string(v.status().message()));
    saved_vocabulary = std::move(v).value();
  }
  ASSIGN_OR_RETURN(data_, LoadJobData(spec_, saved_vocabulary ? &*saved_vocabulary : nullptr));

  if (spec_.model.arch == "gpt" && spec_.model.gpt.vocab_size > 0 &&
      spec_.model.gpt.vocab_size < data_.num_classes) {
    return InvalidArgumentError(
        "model.gpt.vocab_size = " + std::to_string(spec_.model.gpt.vocab_size) +
        ": smaller than the data's vocabulary of " + std::to_string(data_.num_classes) +
        " tokens (0 takes the data's)");
  }
  nn::ModelConfigs configs = ModelConfigsOf(spec_.model, data_.num_classes);
  configs.gpt.activation_checkpointing = spec_.parallelism.activation_checkpointing;
  ASSIGN_OR_RETURN(model_, nn::BuildModel(spec_.model.arch, configs, &gen_));
  // Built (and initialised from the seed) on the CPU, so every device starts from the same
  // weights; then moved, before the optimizer takes its handles.
  RETURN_IF_ERROR(model_->To(device_));
  params_ = model_->Parameters();
  for (const Tensor& p : params_) num_parameters_ += p.numel();
  // ZeRO-1 replaces the whole optimizer exactly when there is a group to shard it over.
  if (!options_.process_group || spec_.parallelism.zero_stage == 0) {
    ASSIGN_OR_RETURN(optimizer_, MakeOptimizer(spec_.optimizer, model_->NamedParameters()));
  }
  RETURN_IF_ERROR(MakeLoaders());
  ASSIGN_OR_RETURN(schedule_, MakeSchedule(spec_, total_steps_));

  if (!dir.empty()) {
    checkpoints_ =
        std::make_unique<CheckpointManager>(dir, spec_.checkpoint.keep_last, options_.clock);
    if (text && !saved_vocabulary && rank_ == 0) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec)
        return InvalidArgumentError("checkpoint.dir: cannot create " + dir + ": " + ec.message());
      // Written whole or not at all (WriteFileAtomically), like the checkpoints.
      RETURN_IF_ERROR(data_.vocabulary->Save(vocabulary_path));
    }
  }
  RETURN_IF_ERROR(Restore());
  RETURN_IF_ERROR(OpenMetricsLog(dir));
  return StartDataParallel();
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
  const int64_t n = data_.train->size();
  const int64_t batch = spec_.batch_size;
  std::shared_ptr<const data::Sampler> sampler;
  if (world_size_ > 1) {
    ASSIGN_OR_RETURN(sampler, data::DistributedSampler::Create(n, rank_, world_size_,
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
        std::to_string(shard) + " training samples each of the " + std::to_string(world_size_) +
        " rank(s) has per epoch");
  }
  total_steps_ = spec_.steps > 0 ? spec_.steps : spec_.epochs * steps_per_epoch_;
  data::DataLoaderOptions loader;
  loader.batch_size = batch;
  loader.drop_last = spec_.data.drop_last;
  loader.num_workers = spec_.data.num_workers;
  loader.prefetch = spec_.data.prefetch;
  train_loader_ = std::make_unique<data::DataLoader>(data_.train, sampler, loader);
  if (data_.eval && rank_ == 0) {
    data::DataLoaderOptions eval = loader;
    eval.batch_size = spec_.eval.batch_size > 0 ? spec_.eval.batch_size : batch;
    eval.drop_last = false;
    eval_loader_ = std::make_unique<data::DataLoader>(
        data_.eval, std::make_shared<data::SequentialSampler>(data_.eval->size()), eval);
  }
  return OkStatus();
}

// Rank r > 0 draws dropout from its own stream: the model generator's seed moved by r.
constexpr uint64_t kRankSeedStride = 0x9E3779B97F4A7C15ull;

Status Trainer::StartDataParallel() {
  if (world_size_ > 1) {
    gen_.SetState(gen_.seed() + kRankSeedStride * static_cast<uint64_t>(rank_), gen_.offset());
  }
  if (!options_.process_group) return OkStatus();
  const spec::OptimizerSpec& o = spec_.optimizer;
  ASSIGN_OR_RETURN(dp_, DataParallel::Create(options_.process_group, spec_.parallelism, *model_,
                                             [&o](std::vector<optim::NamedTensor> p) {
                                               return MakeOptimizer(o, std::move(p));
                                             }));
  RETURN_IF_ERROR(dp_->CheckSameStep(step_));
  if (dp_->zero() != nullptr && !resumed_optimizer_state_.empty()) {
    Status s = dp_->zero()->LoadStateDict(resumed_optimizer_state_);
    if (!s.ok()) return s.WithContext("resuming the sharded optimizer from " + resumed_from_);
    resumed_optimizer_state_.clear();
  }
  return OkStatus();
}

int64_t Trainer::optimizer_state_bytes() const {
  if (dp_ && dp_->zero()) return dp_->zero()->state_bytes();
  return optimizer_ ? dist::OptimizerStateBytes(*optimizer_) : 0;
}

Tensor Trainer::ForwardLoss(const Tensor& input, const Tensor& target) const {
  AutocastGuard autocast(autocast_dtype_);
  Tensor output = model_->Forward(input);
  // (N, C) logits and (N) labels, or (B, T, V) logits and (B, T) next tokens.
  return ops::CrossEntropy(ops::Reshape(output, {-1, output.size(-1)}), ops::Reshape(target, {-1}));
}

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting: return "starting";
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kAllReduceWait: return "allreduce_wait";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kDeviceWait: return "device_wait";
    case Phase::kEvaluate: return "evaluate";
    case Phase::kCheckpoint: return "checkpoint";
    case Phase::kDone: return "done";
  }
  return "unknown";
}

void Progress::Set(Phase p) {
  phase.store(static_cast<int>(p));
  phase_since_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           SteadyClock::now().time_since_epoch())
                           .count());
}

StatusOr<EvalMetrics> Trainer::Evaluate() {
  if (!eval_loader_)
    return FailedPreconditionError("this job's data holds nothing out for evaluation");
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
      Tensor logits = model_->Forward(batch.input);
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
  if (options_.on_eval) options_.on_eval(m);
  if (metrics_log_) RETURN_IF_ERROR(metrics_log_->Eval(m));
  return m;
}

Status Trainer::ForwardBackward(StepMetrics* m, Tensor* loss_sum) {
  const int64_t micro_batches = spec_.parallelism.grad_accumulation_steps;
  for (int64_t micro = 0; micro < micro_batches;) {
    auto t0 = SteadyClock::now();
    SetPhase(Phase::kData);
    StatusOr<std::optional<data::Batch>> next = train_loader_->Next(options_.data_timeout);
    if (!next.ok()) return next.status();
    if (!next->has_value()) {  // the epoch is over
      RETURN_IF_ERROR(train_loader_->Reset(train_loader_->epoch() + 1, 0));
      continue;
    }
    const data::Batch batch = OnDevice(**next);
    m->epoch = static_cast<int64_t>(train_loader_->epoch());
    m->samples += batch.input.size(0) * world_size_;
    m->data_seconds += SecondsSince(t0);

    SetPhase(Phase::kForward);
    const int forward_start = timer_->Mark();
    // The step's gradient is the mean over its micro-batches (and, by the reducer, ranks).
    Tensor loss = ForwardLoss(batch.input, batch.target);
    {
      // Summed on the device: reading it here would make the host wait for the forward.
      autograd::NoGradGuard no_grad;
      *loss_sum = loss_sum->defined() ? ops::Add(*loss_sum, loss.detach()) : loss.detach();
    }
    if (micro_batches > 1) loss = ops::MulScalar(loss, 1.0 / static_cast<double>(micro_batches));
    if (scaler_) loss = scaler_->Scale(loss);

    SetPhase(Phase::kBackward);
    const int backward_start = timer_->Mark();
    spans_.emplace_back(&StepMetrics::forward_seconds, forward_start, backward_start);
    ++micro;
    if (dp_) dp_->BeforeBackward(/*sync=*/micro == micro_batches);
    RETURN_IF_ERROR(autograd::Backward(loss));
    loss = Tensor();
    const int backward_end = timer_->Mark();
    if (dp_) {
      SetPhase(Phase::kAllReduceWait);
      RETURN_IF_ERROR(dp_->AfterBackward());
    }
    // Backward includes the wait for the buckets, which is also reported apart, on the same
    // clock: on a GPU the stream's idle time from backward's end until the buckets are in.
    const int waited = timer_->Mark();
    spans_.emplace_back(&StepMetrics::backward_seconds, backward_start, waited);
    if (dp_) spans_.emplace_back(&StepMetrics::bucket_wait_seconds, backward_end, waited);
  }
  if (dp_) {
    const dist::ReducerStats& stats = dp_->reducer().stats();
    m->allreduce_seconds = stats.comm_seconds;
    m->bus_bandwidth = stats.bus_bandwidth;
  }
  return OkStatus();
}

bool Trainer::StopRequested() const { return options_.stop != nullptr && options_.stop->load(); }

Status Trainer::OptimizerStep(StepMetrics* m, Tensor* grad_norm) {
  SetPhase(Phase::kOptimizer);
  const int start = timer_->Mark();
  m->grad_norm = std::nan("");
  const double clip = spec_.grad_clip_norm;
  if (dp_ && dp_->zero()) {
    if (clip > 0) {
      ASSIGN_OR_RETURN(m->grad_norm, dp_->zero()->ClipGradNorm(clip));
    }
    RETURN_IF_ERROR(dp_->zero()->Step());
  } else if (scaler_) {
    // The all-reduce is complete (ForwardBackward waited for it): unscale, then clip the true
    // gradients; a non-finite norm belongs to a step the scaler skips.
    m->loss_scale = scaler_->scale();
    scaler_->UnscaleAndCheck(params_);
    if (clip > 0) *grad_norm = optim::ClipGradNorm(params_, clip);
    m->skipped = !scaler_->Step(*optimizer_, params_);
    scaler_->Update(/*found_inf=*/m->skipped);
    optimizer_->ZeroGrad(/*set_to_none=*/dp_ == nullptr);
  } else {
    if (clip > 0) *grad_norm = optim::ClipGradNorm(params_, clip);
    optimizer_->Step();
    // Data parallel keeps each .grad a view into its bucket: zero it rather than drop it.
    optimizer_->ZeroGrad(/*set_to_none=*/dp_ == nullptr);
  }
  spans_.emplace_back(&StepMetrics::optimizer_seconds, start, timer_->Mark());
  return OkStatus();
}

StatusOr<TrainSummary> Trainer::Run() {
  const auto run_start = SteadyClock::now();
  TrainSummary summary;
  summary.name = spec_.name;
  summary.total_steps = total_steps_;
  summary.resumed_from = resumed_from_;
  std::deque<double> recent_losses;
  int64_t samples_this_run = 0;
  int64_t last_eval_step = -1;
  model_->Train();
  ResetMemoryPeak(device_);  // each step's peak covers the time since the previous report

  while (step_ < total_steps_) {
    const auto t0 = SteadyClock::now();
    StepMetrics m;
    m.world_size = world_size_;
    m.lr = schedule_->LrAt(step_);
    if (optimizer_) optimizer_->set_lr(m.lr);
    if (dp_ && dp_->zero()) dp_->zero()->set_lr(m.lr);
    timer_->Clear();
    spans_.clear();
    Tensor loss_sum, grad_norm;
    RETURN_IF_ERROR(ForwardBackward(&m, &loss_sum));
    RETURN_IF_ERROR(OptimizerStep(&m, &grad_norm));
    // The step's wait for the device (on a GPU, forward, backward, clipping and the update
    // above were only queued; the fp16 scaler, ZeRO's clipping and data parallelism's buckets
    // wait earlier). The update is applied before the loss is seen: a non-finite one fails the
    // job just below, before anything is saved.
    SetPhase(Phase::kDeviceWait);
    m.loss = loss_sum.item() / static_cast<double>(spec_.parallelism.grad_accumulation_steps);
    if (grad_norm.defined()) m.grad_norm = grad_norm.item();  // computed by now: no wait
    for (const auto& [seconds, from, to] : spans_) m.*seconds += timer_->Seconds(from, to);
    // Ranks must stop at the same step: with data parallelism the request counts once every
    // rank has seen it through the step's agreement.
    std::optional<bool> agreed_stop;
    if (dp_) {
      SetPhase(Phase::kAllReduceWait);
      ASSIGN_OR_RETURN(DataParallel::Agreement agreed, dp_->AgreeOnStep(m.loss, StopRequested()));
      m.loss = agreed.mean_loss;
      agreed_stop = agreed.stop;
    }
    if (!std::isfinite(m.loss)) {
      return FailedPreconditionError("training diverged: the loss is " + std::to_string(m.loss) +
                                     " at step " + std::to_string(step_ + 1) +
                                     " (lower the learning rate or set grad_clip_norm)");
    }

    ++step_;
    if (options_.progress) options_.progress->step.store(step_);
    m.step = step_;
    m.total_steps = total_steps_;
    m.tokens = m.samples * data_.tokens_per_sample;
    const double seconds = SecondsSince(t0);
    m.samples_per_second = static_cast<double>(m.samples) / seconds;
    m.tokens_per_second = static_cast<double>(m.tokens) / seconds;
    m.memory = DeviceMemoryStats(device_);
    ResetMemoryPeak(device_);
    samples_this_run += m.samples;
    ++summary.steps_this_run;
    summary.skipped_steps += m.skipped;
    recent_losses.push_back(m.loss);
    if (recent_losses.size() > kFinalLossWindow) recent_losses.pop_front();
    if (options_.on_step) options_.on_step(m);
    if (metrics_log_) RETURN_IF_ERROR(metrics_log_->Step(m));
    const bool stop = agreed_stop ? *agreed_stop : StopRequested();

    if (eval_loader_ && spec_.eval.every_steps > 0 && step_ % spec_.eval.every_steps == 0 &&
        step_ < total_steps_) {
      ASSIGN_OR_RETURN(summary.eval, Evaluate());
      last_eval_step = step_;
    }
    if (checkpoints_ && spec_.checkpoint.every_steps > 0 &&
        step_ % spec_.checkpoint.every_steps == 0 && !stop) {
      std::string path;
      RETURN_IF_ERROR(SaveCheckpoint(&path));
    }
    if (stop && step_ < total_steps_) {
      summary.interrupted = true;
      break;
    }
  }

  // Checkpoint first: with ZeRO it is a collective, which must not wait on rank 0's evaluation.
  if (checkpoints_ && saved_step_ != step_) {
    std::string path;
    RETURN_IF_ERROR(SaveCheckpoint(&path));
  }
  if (!summary.interrupted && eval_loader_ && last_eval_step != step_) {
    ASSIGN_OR_RETURN(summary.eval, Evaluate());
  }
  SetPhase(Phase::kDone);
  summary.steps = step_;
  summary.world_size = world_size_;
  summary.optimizer_state_bytes = optimizer_state_bytes();
  summary.checkpoint = last_checkpoint_;
  summary.seconds = SecondsSince(run_start);
  summary.final_train_loss =
      recent_losses.empty() ? std::nan("")
                            : std::accumulate(recent_losses.begin(), recent_losses.end(), 0.0) /
                                  static_cast<double>(recent_losses.size());
  summary.samples_per_second = static_cast<double>(samples_this_run) / summary.seconds;
  summary.tokens_per_second =
      summary.samples_per_second * static_cast<double>(data_.tokens_per_sample);
  return summary;
}

}  // namespace trainyard::trainer
