#include "worker/dist/pipeline.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "worker/autograd/engine.h"
#include "worker/tensor/factories.h"

namespace trainyard::dist {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// One step on one stage (Note [Pipeline schedules]).
class StageStep {
 public:
  StageStep(const PipelineOptions& o, int m, const PipelineCallbacks& c)
      : o_(o), m_(m), c_(c), inputs_(m), outputs_(m), received_(m) {}

  Status Run();
  PipelineStats stats;

 private:
  bool first() const { return o_.stage == 0; }
  bool last() const { return o_.stage == o_.stages - 1; }
  // A transfer over a pair group: `send` from this rank, else from the other.
  std::shared_ptr<Work> Transfer(ProcessGroup& pair, const Tensor& t, bool send) {
    const int peer = 1 - pair.rank();
    return send ? pair.Send(t, peer) : pair.Recv(t, peer);
  }
  void PostReceive(int m);  // of micro-batch m's activation, once
  Status Forward(int m);
  Status Backward(int m);

  const PipelineOptions& o_;
  const int m_;
  const PipelineCallbacks& c_;
  std::vector<Tensor> inputs_, outputs_;
  std::vector<std::shared_ptr<Work>> received_;
  struct Sent {
    ProcessGroup* pair;
    std::shared_ptr<Work> work;
    Tensor tensor;  // alive until the send ends
  };
  std::vector<Sent> sent_;  // waited for at the end
};

void StageStep::PostReceive(int m) {
  if (first() || m >= m_ || received_[m]) return;
  inputs_[m] = Empty(o_.activation_shape(m), o_.activation_options);
  received_[m] = Transfer(*o_.prev, inputs_[m], /*send=*/false);
}

Status StageStep::Forward(int m) {
  Tensor input;
  if (!first()) {
    PostReceive(m);
    RETURN_IF_ERROR(WaitFor(*o_.prev, *received_[m]));
    input = inputs_[m];
    input.set_requires_grad(true);
  }
  const auto start = SteadyClock::now();
  StatusOr<Tensor> out = c_.forward(m, input);
  stats.forward_seconds += SecondsSince(start);
  RETURN_IF_ERROR(out.status());
  outputs_[m] = *out;
  if (!last()) {
    if (out->shape() != o_.activation_shape(m) || out->dtype() != o_.activation_options.dtype) {
      return InvalidArgumentError(
          "pipeline: stage " + std::to_string(o_.stage) + " made an activation " +
          out->shape().ToString() + " " + DTypeName(out->dtype()) + " where the stages exchange " +
          o_.activation_shape(m).ToString() + " " + DTypeName(o_.activation_options.dtype));
    }
    Tensor sent = ConvertTo(out->detach(), out->dtype(), /*force_copy=*/true);
    sent_.push_back({o_.next.get(), Transfer(*o_.next, sent, /*send=*/true), sent});
  }
  return OkStatus();
}

Status StageStep::Backward(int m) {
  Tensor grad;
  if (!last()) {
    grad = Empty(o_.activation_shape(m), o_.activation_options);
    std::shared_ptr<Work> w = Transfer(*o_.next, grad, /*send=*/false);
    RETURN_IF_ERROR(WaitFor(*o_.next, *w));
  }
  const auto start = SteadyClock::now();
  if (c_.before_backward) c_.before_backward(m);
  Status s =
      grad.defined() ? autograd::Backward(outputs_[m], grad) : autograd::Backward(outputs_[m]);
  if (s.ok() && c_.after_backward) s = c_.after_backward(m);
  stats.backward_seconds += SecondsSince(start);
  RETURN_IF_ERROR(s);
  outputs_[m] = Tensor();
  if (first()) return OkStatus();
  // The pair's order: the next activation's receive comes before this gradient.
  const int w = o_.one_f_one_b ? std::min(o_.stages - 1 - o_.stage, m_) : m_;
  PostReceive(w + m + 1);
  Tensor g = inputs_[m].grad();
  if (!g.defined()) g = Zeros(o_.activation_shape(m), o_.activation_options);
  sent_.push_back({o_.prev.get(), Transfer(*o_.prev, g, /*send=*/true), g});
  inputs_[m] = Tensor();
  return OkStatus();
}

Status StageStep::Run() {
  const auto start = SteadyClock::now();
  const int warmup = o_.one_f_one_b ? std::min(o_.stages - 1 - o_.stage, m_) : m_;
  Status s;
  for (int f = 0; f < warmup && s.ok(); ++f) s = Forward(f);
  for (int i = 0; i + warmup < m_ && s.ok(); ++i) {
    s = Forward(warmup + i);
    if (s.ok()) s = Backward(i);
  }
  for (int b = std::max(m_ - warmup, 0); b < m_ && s.ok(); ++b) s = Backward(b);
  // Every send ends before the step does (its tensor is alive until then), failed or not.
  for (const Sent& sent : sent_) {
    Status done = WaitFor(*sent.pair, *sent.work);
    if (s.ok()) s = done;
  }
  stats.wall_seconds = SecondsSince(start);
  stats.compute_seconds = stats.forward_seconds + stats.backward_seconds;
  return s;
}

}  // namespace

StatusOr<PipelineStats> RunPipelineStep(const PipelineOptions& options, int micro_batches,
                                        const PipelineCallbacks& callbacks) {
  if (options.stages < 1 || options.stage < 0 || options.stage >= options.stages) {
    return InvalidArgumentError("pipeline: stage " + std::to_string(options.stage) +
                                " is not one of " + std::to_string(options.stages));
  }
  if (micro_batches < 1) return InvalidArgumentError("pipeline: no micro-batches");
  const bool needs_prev = options.stage > 0, needs_next = options.stage < options.stages - 1;
  if ((needs_prev && (!options.prev || options.prev->size() != 2)) ||
      (needs_next && (!options.next || options.next->size() != 2))) {
    return InvalidArgumentError("pipeline: stage " + std::to_string(options.stage) +
                                " needs a group of two with each neighbour");
  }
  if (!callbacks.forward || !options.activation_shape) {
    return InvalidArgumentError("pipeline: no forward or no activation shape");
  }
  StageStep step(options, micro_batches, callbacks);
  RETURN_IF_ERROR(step.Run());
  return step.stats;
}

double TheoreticalBubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

}  // namespace trainyard::dist
