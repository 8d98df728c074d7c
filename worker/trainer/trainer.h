// Trainer: one training run on one machine, from a job spec to a trained, checkpointed model.
//
//   Create:  spec -> data (job_data.h), model (nn::BuildModel), optimizer, schedule, loaders;
//            then, when checkpoint.dir holds a checkpoint and checkpoint.resume is on, restore
//            it (weights, optimizer, step, data position, generators); otherwise load
//            checkpoint.init_from's weights when set.
//   Run:     until the step count (steps, or epochs x steps per epoch), each step:
//              grad_accumulation_steps x (data -> forward + loss -> backward)
//              -> clip, lr, step, zero_grad
//            evaluating every eval.every_steps and at the end, checkpointing every
//            checkpoint.every_steps, at the end and when stopped (with checkpoint.async, written
//            in the background; Run returns once the last is committed; Note [Asynchronous
//            checkpoint] in async_checkpoint.h). With a checkpoint.dir (or
//            TrainerOptions::metrics_file), rank 0 appends each step's and evaluation's
//            metrics to its metrics.jsonl (metrics_log.h).
//
// Note [Mixed precision]: with spec.precision bf16 or fp16, forward and loss (in training and
// evaluation) run under AutocastGuard of that dtype (worker/autograd/autocast.h); parameters,
// gradients and optimizer state stay float32. fp16 adds a GradScaler (worker/optim/
// grad_scaler.h), through its UpdateStep (update_step.h): each micro-batch's loss is scaled
// before backward, and the step unscales the gradients (after the data-parallel all-reduce, so
// every rank decides alike), clips them, and skips the optimizer when any is inf or NaN
// (StepMetrics::skipped). The scaler's state is saved in optimizer.safetensors as
// "grad_scaler.scale" and "grad_scaler.growth_tracker" and restored on resume. With ZeRO each
// rank unscales and checks its gradient shards and the ranks agree on skipping.
//
// With TrainerOptions::process_group this process is one rank of a data-parallel run
// (data_parallel.h): it reads its DistributedSampler shard, the reducer averages gradients
// during backward, the ranks agree on the loss and on stopping every step, rank 0 writes
// checkpoints and evaluates. N ranks with batch b train like one process with batch N x b.
//
// Note [Resharding on resume]: the manifest's position counts samples consumed by all ranks
// in the epoch (local position x world size); a run resumed with world size M restarts each
// rank at position / M of its new shard. With the same M the resume is exact; with another M
// it is exact when position is a multiple of M (else up to M - 1 samples repeat). Weights and
// optimizer state (ZeRO shards gathered into the unsharded form) do not depend on M.
//
// Note [Elastic training] (spec::IsElastic; docs/design/009-elastic.md): the group's size m
// may change while the run goes on, between parallelism.min_world_size and max_world_size.
// The global batch does not: a step is M = world_size x grad_accumulation_steps micro-batches
// of batch_size, rank r of m taking micro-batches r, r + m, ... (data::ElasticSampler, Note
// [Elastic shards]), each weighted 1/M in the gradient; micro-batch j of step s draws its
// dropout from a stream of (seed, j, s). So what a step computes depends on neither m nor the
// rank, and a run whose membership changes equals one that made the same changes through
// checkpoints (to float rounding: the all-reduce sums in another order). When a collective
// fails (a member is lost; the group was aborted for a regroup) the step in flight is
// abandoned: its gradients are dropped, and options.regroup gives the next group. When the
// step's agreement carries a regroup request (members join), the ranks finish the step first.
// Either way the members of the new group then take the state of the member that applied the
// most steps (live_state.h: the weights, buffers and optimizer state, by broadcast; a rank
// whose update of the abandoned step went through is ahead by one), and every rank continues
// from that step, its data position a function of the step alone. Rank 0 of the new group
// raises the checkpoint fence to the new attempt, evaluates and writes metrics.jsonl.
//
// Note [Exact resume]: a run stopped after step k and resumed gives the same losses, bit for
// bit, as one that never stopped (at the same thread count). Everything a step depends on is
// either a function of the step number (the learning rate), restored from the checkpoint
// (weights, optimizer state, the generators that drive initialisation and dropout) or a
// function of (seed, epoch, position) (the data order, worker/data/sampler.h). Evaluation
// draws no random numbers and leaves the model as it found it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/status.h"
#include "worker/data/data_loader.h"
#include "worker/data/device_copier.h"
#include "worker/data/elastic_sampler.h"
#include "worker/nn/module.h"
#include "worker/optim/grad_scaler.h"
#include "worker/optim/schedule.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/generator.h"
#include "worker/tensor/storage.h"
#include "worker/trainer/async_checkpoint.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/data_parallel.h"
#include "worker/trainer/job_data.h"
#include "worker/trainer/metrics_log.h"
#include "worker/trainer/pipeline_stage.h"
#include "worker/trainer/update_step.h"

namespace trainyard::trainer {

// One optimizer step, reported after it completes.
struct StepMetrics {
  int64_t step = 0;         // steps completed, this one included (1 for the first)
  int64_t total_steps = 0;  // the run's length in steps
  int64_t epoch = 0;        // the epoch this step's batch came from (0-based)
  double loss = 0;          // the batch's mean loss, before this step's update
  double lr = 0;            // the learning rate this step used
  double grad_norm = 0;     // total L2 gradient norm before clipping; NaN when not clipping
  int64_t samples = 0;      // samples in the batch
  int64_t tokens = 0;       // tokens in the batch (samples x context for text; = samples else)
  double samples_per_second = 0;  // of this step, all four phases included
  double tokens_per_second = 0;
  // Time of each phase, in seconds: data is the host's wait for the batch; the others are the
  // device's time from the phase's first op to the next phase's (on a GPU, where the host only
  // queues work, timing events on the compute stream; on the CPU, the same spans by the clock).
  double data_seconds = 0;       // waiting for the batch
  double forward_seconds = 0;    // model and loss
  double backward_seconds = 0;   // autograd, and the wait for the gradient buckets
  double optimizer_seconds = 0;  // clipping, the update and zero_grad
  // Data parallelism (zero with one rank). samples and tokens above count every rank's
  // micro-batches of the step; loss is their mean over ranks.
  int world_size = 1;
  double allreduce_seconds = 0;    // gradient collectives' running time, summed over buckets
  double bucket_wait_seconds = 0;  // waiting for buckets after backward ended (not hidden)
  double bus_bandwidth = 0;        // gradient all-reduce bus bandwidth, bytes/s
  // precision fp16 (Note [Mixed precision]): the loss scale this step's backward used (0 for
  // fp32 and bf16), and whether the step was skipped because a gradient was inf or NaN (the
  // weights and the optimizer state did not change; the scale was lowered).
  double loss_scale = 0;
  bool skipped = false;
  // Pipeline parallelism: the fraction of the step's pipeline this rank's stage spent waiting
  // for its neighbours (dist::PipelineStats::bubble); 0 otherwise.
  double pipeline_bubble = 0;
  // Tensor memory on the training device (the CPU's is the process's) after the step; its peak
  // is the most since the previous step's report, so the evaluation or checkpoint that ran
  // between two steps counts in the later one.
  MemoryStats memory;
};

// One pass over (at most eval.max_batches of) the held-out split, in evaluation mode.
struct EvalMetrics {
  int64_t step = 0;     // steps completed when it ran
  double loss = 0;      // mean cross-entropy per sample (per token for text)
  double accuracy = 0;  // fraction of samples (tokens) whose arg-max is the target
  int64_t samples = 0;  // samples evaluated
  double seconds = 0;
};

struct TrainSummary {
  std::string name;             // spec.name
  int64_t steps = 0;            // steps completed, counting those before a resume
  int64_t total_steps = 0;      // the run's length
  int64_t steps_this_run = 0;   // steps this process took
  double final_train_loss = 0;  // mean loss of this process's last (up to) 50 steps; NaN if none
  std::optional<EvalMetrics> eval;  // the last evaluation; nullopt without a held-out split
  double seconds = 0;               // wall time of Run
  double samples_per_second = 0;    // over this run's steps (all phases)
  double tokens_per_second = 0;
  std::string checkpoint;    // the last checkpoint written or restored; "" when none
  std::string resumed_from;  // the checkpoint this run resumed from; "" when none
  bool interrupted = false;  // stopped by TrainerOptions::stop before the end
  int world_size = 1;        // ranks that trained together
  // Optimizer state held by this rank (moments, momentum; a 1/world_size share with ZeRO).
  int64_t optimizer_state_bytes = 0;
  int64_t weight_bytes = 0;  // the parameters this rank holds (DataParallel::weight_bytes)
  // The most gradient memory this rank held at once: every .grad in one process; the
  // reducer's buckets and shards with data parallelism (ZeRO-2: the shards and the buckets
  // alive at the busiest moment).
  int64_t gradient_bytes = 0;
  int64_t peak_resident_bytes = 0;  // the process's peak resident set (getrusage's ru_maxrss)
  // Steps of this run the fp16 loss scaler skipped (StepMetrics::skipped); 0 otherwise.
  int64_t skipped_steps = 0;
};

// What the training thread is doing now, for health reports read from another thread (a rank
// under the worker daemon reports it every half second; the coordinator names a hung rank by it).
enum class Phase : int {
  kStarting,
  kData,
  kForward,
  kBackward,
  kAllReduceWait,
  kOptimizer,
  kDeviceWait,
  kEvaluate,
  kCheckpoint,
  kRegroup,
  kDone
};
// "starting", "data", ..., "allreduce_wait", ..., "done". kDeviceWait ("device_wait"): the
// step's last wait for its device (for the loss), while a GPU rank's queued work runs.
// kRegroup ("regroup"): an elastic rank between groups (Note [Elastic training]).
const char* PhaseName(Phase phase);

struct Progress {
  std::atomic<int> phase{0};               // a Phase
  std::atomic<int64_t> step{0};            // steps completed
  std::atomic<int64_t> phase_since_ns{0};  // steady clock, when the phase began
  void Set(Phase p);
};

struct TrainerOptions {
  std::function<void(const StepMetrics&)> on_step;
  std::function<void(const EvalMetrics&)> on_eval;
  // After each checkpoint is committed: its directory and step. On the training thread; with
  // checkpoint.async, after the first step that ends once the write is done (at the latest at
  // the next checkpoint, or at the end of Run).
  std::function<void(const std::string& dir, int64_t step)> on_checkpoint;
  // Checked after every step; once true, Run saves a checkpoint (when checkpoint.dir is set)
  // and returns with interrupted = true. May be set from another thread or a signal handler.
  const std::atomic<bool>* stop = nullptr;
  // Stamps checkpoints (the real clock when null); must outlive the trainer.
  const Clock* clock = nullptr;
  // Longest wait for one batch from the data loader.
  std::chrono::nanoseconds data_timeout = std::chrono::minutes(5);
  // This process's group when it is one rank of spec.parallelism.world_size (null: one
  // process). Rank 0 writes checkpoints and evaluates; every rank reads its data shard.
  std::shared_ptr<dist::ProcessGroup> process_group;
  // With spec.parallelism.pipeline_stages > 1, this rank's pipeline groups (ranks::JoinGroup
  // makes them; Note [Pipeline stages] in pipeline_stage.h).
  dist::PipelineGroups pipeline;
  // Updated at every phase change when set; must outlive the trainer.
  Progress* progress = nullptr;
  // The loss scaler of precision fp16 (PyTorch's defaults); Create rejects bad values.
  optim::GradScalerOptions grad_scaler;
  // The run's identity (Note [Run identity]): the coordinator's Job.uid and id. An empty uid
  // (`trainyard train`) adopts the uid of the checkpoint it resumes, or makes a new one; an
  // empty job is spec.name.
  std::string run_uid;
  std::string job;
  // The coordinator's attempt of the job this rank belongs to, the epoch of its checkpoint
  // fence (Note [Checkpoint fence] in checkpoint_fence.h): rank 0 raises checkpoint.dir's
  // fence to it before resuming, and its checkpoints commit only while the fence allows.
  // 0 (`trainyard train`): no fence is read or written.
  int64_t attempt = 0;
  // Where rank 0 writes the per-step metrics (metrics_log.h); "": <checkpoint.dir>/metrics.jsonl
  // with a checkpoint.dir, else none.
  std::string metrics_file;
  // Elastic world size (Note [Elastic training]; spec::IsElastic). `regroup` is called on the
  // training thread when the group failed (`why`: the collective's error) or after a step
  // whose agreement carried a regroup request (`why` OK); it blocks (bounded) until this rank
  // has joined its next group and returns it with the attempt it belongs to, or an error that
  // ends Run with it. Null: a failed group fails the run, as without elasticity.
  struct NextGroup {
    std::shared_ptr<dist::ProcessGroup> group;
    int64_t attempt = 0;
  };
  std::function<StatusOr<NextGroup>(const Status& why)> regroup;
  // Set (by another thread) when the ranks should regroup after a step (members join): the
  // ranks agree on the step through its agreement, then call `regroup`. Must outlive the
  // trainer.
  const std::atomic<bool>* regroup_requested = nullptr;
};

class Trainer {
 public:
  // Builds everything the spec describes and restores or initialises the weights (see the top
  // of this file). `spec` must have come from spec::ParseJobSpec. Errors name the spec field
  // (data that does not fit the model, a missing file, a checkpoint of another model).
  // Sets the kernel thread count when spec.num_threads > 0 (process-wide). Device "cuda" needs
  // the CUDA backend and a visible GPU (FailedPrecondition saying which is missing).
  static StatusOr<std::unique_ptr<Trainer>> Create(spec::JobSpec spec, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (or until stopped). Errors: the loss became NaN or infinite (naming the
  // step), a data or checkpoint failure. Call once. After it, model() is whole on every rank,
  // but for pipeline stages, where only rank 0's is (Note [Pipeline stages]).
  StatusOr<TrainSummary> Run();

  // Evaluates the current model on the held-out split; FailedPrecondition when there is none.
  // With pipeline stages, on rank 0 once the model is whole (after Run; FailedPrecondition
  // otherwise).
  StatusOr<EvalMetrics> Evaluate();

  const spec::JobSpec& spec() const { return spec_; }
  const JobData& data() const { return data_; }
  nn::Module& model() { return *model_; }
  // Bytes of optimizer state this rank holds (a 1/world_size share with ZeRO).
  int64_t optimizer_state_bytes() const;
  int64_t weight_bytes() const;                               // TrainSummary::weight_bytes
  int64_t gradient_bytes() const;                             // TrainSummary::gradient_bytes
  int64_t num_parameters() const { return num_parameters_; }  // tied weights counted once
  int64_t step() const { return step_; }
  int64_t total_steps() const { return total_steps_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // The checkpoint Create restored ("" when it started fresh).
  const std::string& resumed_from() const { return resumed_from_; }
  const RunIdentity& run() const { return run_; }
  // What changed on resume that the user should know ("" for nothing): a cosine schedule
  // whose length follows the run's, resumed to another length.
  const std::string& resume_note() const { return resume_note_; }

 private:
  Trainer(spec::JobSpec spec, TrainerOptions options);
  Status Init();
  // Init's parts, in order. LoadData returns whether a text run's vocabulary came from
  // checkpoint.dir (else OpenCheckpointDir saves the data's there, on rank 0).
  StatusOr<bool> LoadData();
  Status BuildModel();               // model_ on device_, and update_ over its parameters
  Status CheckGraphClasses() const;  // a graph's output covers the data's classes
  Status OpenCheckpointDir(bool save_vocabulary);
  std::string VocabularyPath() const;  // in checkpoint.dir; "" without one
  Status MakeLoaders();
  // device_ from spec.device (and the rank); the CUDA backend set up for it.
  Status ChooseDevice();
  // The batch on device_ (itself on the CPU).
  data::Batch OnDevice(const data::Batch& batch);
  Status Restore();
  // Starts data parallelism (with a process group), then update_.
  Status StartDataParallel();
  data::DataLoaderOptions LoaderOptions() const;
  void MakeEvalLoader();  // rank 0's, when the data holds some out (else none)

  // Elastic training (trainer_elastic.cc, Note [Elastic training]).
  // The micro-batches of a step in all, and this rank's share of them.
  int64_t StepMicroBatches() const;
  int64_t RankMicroBatches() const;
  // The dropout stream of this rank's i-th micro-batch of the step.
  void SeedMicroBatch(int64_t i);
  // steps_per_epoch_, which does not depend on the world size; InvalidArgument when a step
  // needs more samples than the data has.
  Status ElasticStepsPerEpoch();
  // train_loader_ over this rank's ElasticSampler, at step_'s position.
  Status MakeElasticLoader();
  // Takes the most advanced member's state, then starts data parallelism over the group.
  Status JoinElasticGroup();
  // Whether the failed step may be retried in a new group (a collective failed).
  bool CanRegroup() const;
  // Leaves the group, joins the next (options_.regroup) and continues (JoinElasticGroup).
  Status Regroup(const Status& why);
  // `s`, noting a failure as the group's (CanRegroup).
  Status CollectiveResult(Status s);

  // Run's totals over its steps, for the TrainSummary (trainer_run.cc).
  struct RunTally;
  // One step, reported and followed by its evaluation or checkpoint when due; returns whether
  // the run was asked to stop.
  StatusOr<bool> Step(RunTally* tally);
  // The step's forward, backward and update, and its wait for the device: fills m but for the
  // fields of the step count, rates and memory. Fails when the loss is not finite. *agreed_stop
  // is the ranks' agreed stop request with data parallelism (nullopt in one process).
  Status TrainStep(StepMetrics* m, std::optional<bool>* agreed_stop);
  // Forward and backward over the step's micro-batches: fills epoch, samples and the data and
  // all-reduce time, sums the micro-batches' losses into *loss_sum (on the device) and marks
  // the forward and backward spans on timer_.
  Status ForwardBackward(StepMetrics* m, Tensor* loss_sum);
  // The next micro-batch on device_, starting the next epoch when this one is over; counts its
  // samples, epoch and wait into *m.
  StatusOr<data::Batch> NextBatch(StepMetrics* m);
  // ForwardBackward through this rank's pipeline stage (trainer_pipeline.cc): the step's
  // micro-batches by the spec's schedule; *loss_sum is their summed loss on the last stage,
  // 0 on the others.
  Status PipelineForwardBackward(StepMetrics* m, Tensor* loss_sum);
  // The data-parallel replicas that read different data, and this rank's: with a pipeline,
  // every stage of a replica reads the same (Note [Pipeline stages]); else the ranks.
  int DataWorld() const { return pipe_ ? pipe_->groups().replicas : world_size_; }
  int DataRank() const { return pipe_ ? pipe_->groups().replica : rank_; }
  // Forward and backward of one micro-batch; `last` is the step's last (its backward
  // synchronises the gradients across ranks).
  Status MicroBatch(const data::Batch& batch, bool last, Tensor* loss_sum);
  // update_'s Apply; the norm still on the device goes to *grad_norm, to be read with the loss.
  Status OptimizerStep(StepMetrics* m, Tensor* grad_norm);
  // Averages the loss over ranks and agrees on stopping (data parallelism only: else nullopt).
  StatusOr<std::optional<bool>> AgreeOnStep(StepMetrics* m);
  // The fields of m that follow from the step's count, time since `start` and memory.
  void Finalize(std::chrono::steady_clock::time_point start, StepMetrics* m);
  // The evaluation and checkpoint due after a step; `stop`: the run stops here.
  Status EvaluateOrSave(bool stop, RunTally* tally);
  // The last checkpoint and evaluation, and the summary.
  StatusOr<TrainSummary> Finish(RunTally* tally);
  bool StopRequested() const;
  void SetPhase(Phase p) {
    if (options_.progress) options_.progress->Set(p);
  }
  // Takes a checkpoint of the current step (a collective with ZeRO): rank 0 writes it, or with
  // checkpoint.async hands its snapshot to writer_ after the previous write is committed.
  Status SaveCheckpoint();
  // Evaluate on rank 0 when the job holds data out (nullopt elsewhere); with ZeRO-3 every rank
  // evaluates, as the units gather their weights together. With pipeline stages every rank
  // takes part in gathering the model to rank 0 first, unless `gathered` says it is whole.
  StatusOr<std::optional<EvalMetrics>> EvaluateOnRank0(bool gathered = false);
  // writer_ when this rank is 0 and checkpoint.async is on (and it has none yet).
  void OpenCheckpointWriter();
  // Reports writer_'s finished write (its error fails the run); `wait`: waits for the write
  // in flight first, else leaves one in flight for later.
  Status CollectCheckpoint(bool wait);
  // What a checkpoint of the current step records, besides the tensors.
  CheckpointState StateToSave() const;
  // Records a committed checkpoint and calls on_checkpoint.
  void Committed(const CommittedCheckpoint& checkpoint);
  // The mean loss of a batch: cross-entropy over the last dimension of the model's output,
  // forward and loss under autocast (Note [Mixed precision]).
  Tensor ForwardLoss(const Tensor& input, const Tensor& target) const;
  // Loads a checkpoint's optimizer.safetensors into update_ (ZeRO keeps it for
  // StartDataParallel).
  Status RestoreOptimizerState(const std::string& path);
  // OK when `saved` (the manifest of `path`) was written by this run; else FailedPrecondition
  // naming the directory, the writer, what differs and the ways on.
  Status CheckSameRun(const std::string& path, const CheckpointState& saved,
                      const Json& spec_json) const;
  Status ResumeFrom(const std::string& path);
  Status OpenMetricsLog(const std::string& checkpoint_dir);
  Status Unresumable(const std::string& path, const Status& s) const;

  spec::JobSpec spec_;
  TrainerOptions options_;
  Generator gen_;  // initialisation and dropout; outlives model_
  JobData data_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<DataParallel> dp_;  // null in a one-process run
  // This rank's pipeline stage (spec.parallelism.pipeline_stages > 1); dp_ is then its stage's
  // data-parallel group (null with one replica).
  std::unique_ptr<PipelineStage> pipe_;
  // The optimizer step of the spec's mode (plain, fp16 or ZeRO); after dp_, whose reducer
  // ZeRO's refers to.
  std::unique_ptr<UpdateStep> update_;
  DType autocast_dtype_ = DType::kFloat32;  // spec.precision's; kFloat32: autocast off
  int rank_ = 0;
  int world_size_ = 1;
  // Note [Elastic training].
  bool elastic_ = false;
  std::shared_ptr<const data::ElasticSampler> elastic_sampler_;
  int64_t applied_step_ = 0;     // steps whose update this rank applied (step_, or one more)
  bool regroup_agreed_ = false;  // the last step's agreement asked for a regroup
  bool group_failed_ = false;    // a collective of the current group failed
  int64_t attempt_ = 0;          // the attempt the current group belongs to (the fence epoch)
  std::unique_ptr<optim::LrSchedule> schedule_;
  Device device_;                               // spec.device: cpu, or this rank's GPU
  std::unique_ptr<data::DeviceCopier> copier_;  // batches to device_ (CUDA only)
  // The step's phases on device_'s stream, read after the step's wait for the loss: each span
  // adds the time from one mark to another to a StepMetrics field.
  std::unique_ptr<StreamTimer> timer_;
  std::vector<std::tuple<double StepMetrics::*, int, int>> spans_;
  std::unique_ptr<data::DataLoader> train_loader_;
  std::unique_ptr<data::DataLoader> eval_loader_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  // checkpoint.async on rank 0; after checkpoints_, which it writes through.
  std::unique_ptr<AsyncCheckpointWriter> writer_;
  std::unique_ptr<MetricsLog> metrics_log_;  // rank 0 with a checkpoint.dir (metrics_log.h)
  int64_t num_parameters_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t shard_size_ = 0;  // samples per epoch this rank reads
  int64_t total_steps_ = 0;
  int64_t step_ = 0;
  int64_t saved_step_ = -1;  // step of the newest checkpoint on disk for this run
  std::string last_checkpoint_;
  std::string resumed_from_;
  RunIdentity run_;  // recorded in every checkpoint (Note [Run identity])
  std::string resume_note_;
};

}  // namespace trainyard::trainer
