// Trainer's step as one stage of a pipeline (Note [Pipeline stages] in pipeline_stage.h): the
// step's micro-batches go through dist::RunPipelineStep, this stage's part of the model in
// each forward, the loss on the last stage.
#include <chrono>
#include <vector>

#include "worker/autograd/autocast.h"
#include "worker/autograd/grad_mode.h"
#include "worker/dist/pipeline.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {

Status Trainer::PipelineForwardBackward(StepMetrics* m, Tensor* loss_sum) {
  // Every stage of a replica reads the same micro-batches: the first uses their tokens, the
  // last their targets, and each knows the shape of what its neighbours send.
  const int micro_batches = static_cast<int>(RankMicroBatches());
  std::vector<data::Batch> batches;
  for (int i = 0; i < micro_batches; ++i) {
    ASSIGN_OR_RETURN(data::Batch batch, NextBatch(m));
    batches.push_back(std::move(batch));
  }
  const dist::PipelineGroups& g = pipe_->groups();
  dist::PipelineOptions o;
  o.stage = g.stage;
  o.stages = g.stages;
  o.prev = g.prev;
  o.next = g.next;
  const int64_t width = spec_.model.gpt.n_embd;
  o.activation_shape = [&](int i) {
    return Shape{batches[i].input.size(0), batches[i].input.size(1), width};
  };
  o.activation_options = Options(DType::kFloat32).set_device(device_);
  o.one_f_one_b = spec_.parallelism.pipeline_schedule == "1f1b";

  dist::PipelineCallbacks c;
  Tensor sum;  // of the micro-batches' losses, on the last stage
  c.forward = [&](int i, const Tensor& input) -> StatusOr<Tensor> {
    SetPhase(Phase::kForward);
    AutocastGuard autocast(autocast_dtype_);  // Note [Mixed precision]
    Tensor out = pipe_->Forward(batches[i].input, input);
    if (!pipe_->last()) return ops::To(out, DType::kFloat32);  // what the stages exchange
    Tensor loss = ops::CrossEntropy(ops::Reshape(out, {-1, out.size(-1)}),
                                    ops::Reshape(batches[i].target, {-1}));
    {
      autograd::NoGradGuard no_grad;
      sum = sum.defined() ? ops::Add(sum, loss.detach()) : loss.detach();
    }
    // The step's gradient is the mean over its micro-batches (and, by dp_, the replicas).
    if (micro_batches > 1) loss = ops::MulScalar(loss, 1.0 / micro_batches);
    return update_->ScaleLoss(loss);
  };
  c.before_backward = [&](int i) {
    SetPhase(Phase::kBackward);
    if (dp_) dp_->BeforeBackward(/*sync=*/i == micro_batches - 1);
  };
  c.after_backward = [&](int) -> Status {
    if (!dp_) return OkStatus();
    SetPhase(Phase::kAllReduceWait);
    const auto start = std::chrono::steady_clock::now();
    Status s = dp_->AfterBackward();
    m->bucket_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return s;
  };
  ASSIGN_OR_RETURN(const dist::PipelineStats stats, dist::RunPipelineStep(o, micro_batches, c));
  *loss_sum = sum.defined() ? sum : Zeros(Shape{}, Options(DType::kFloat32).set_device(device_));
  m->forward_seconds = stats.forward_seconds;
  m->backward_seconds = stats.backward_seconds;
  m->pipeline_bubble = stats.bubble();
  if (dp_) {
    const dist::ReducerStats& reduced = dp_->reducer().stats();
    m->allreduce_seconds = reduced.comm_seconds;
    m->bus_bandwidth = reduced.bus_bandwidth;
  }
  return OkStatus();
}

}  // namespace trainyard::trainer
