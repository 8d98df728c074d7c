// RunPipelineStep: one training step of a pipeline-parallel stage (docs/design/010).
//
// Stage s of P holds a contiguous part of the model and runs M micro-batches per step. Forward
// m takes the previous stage's activation (stage 0 reads its own input) and sends its output on;
// the last stage's forward ends in the micro-batch's loss. Backward m takes the gradient of
// that output from the next stage (the last stage starts from its loss) and sends the gradient
// of its input back. Neighbours exchange over a group of the two of them (`prev`, `next`), each
// transfer a Send on one side and a Recv on the other (ProcessGroup's point-to-point ops), so
// both must issue the pair's transfers in one order:
//
// Note [Pipeline schedules]
//   GPipe  every forward (0..M-1), then every backward (0..M-1). On the pair (s, s+1): act 0 to
//          M-1, then grad 0 to M-1. A stage holds all M micro-batches' activations.
//   1F1B   stage s first runs w = min(P-1-s, M) forwards, then alternates a forward and a
//          backward, then runs the w backwards left. On the pair (s, s+1) the transfers come as
//          act 0 to w_s-1, then for each i: act w_s+i (while there is one), grad i. Stage s
//          issues them so by itself; stage s+1 posts its receive of act w_s+i before it sends
//          grad i. A stage holds at most w+1 micro-batches' activations.
// Receives are posted as soon as their turn on the pair comes and waited for only when the
// data is needed; sends are waited for at the end of the step. Every wait is bounded by the
// group's timeout, and a failed transfer fails the step naming it.
#pragma once

#include <functional>
#include <memory>

#include "common/status.h"
#include "worker/dist/process_group.h"
#include "worker/tensor/tensor.h"

namespace trainyard::dist {

// A rank's groups in a pipeline of P stages by D data-parallel replicas (world size P x D):
// rank s x D + d is stage s of replica d.
struct PipelineGroups {
  int stage = 0, stages = 1;      // s, P
  int replica = 0, replicas = 1;  // d, D
  // The D ranks of stage s (null when D = 1): their gradients are averaged.
  std::shared_ptr<ProcessGroup> data;
  // With stage s-1 and with stage s+1 of replica d (null at the ends): activations and their
  // gradients.
  std::shared_ptr<ProcessGroup> prev, next;
  // Stage 0 and P-1 of replica d, which both hold the tied embedding (the pair itself when
  // P = 2; null on the stages between).
  std::shared_ptr<ProcessGroup> tied;
  bool enabled() const { return stages > 1; }
};

struct PipelineOptions {
  int stage = 0;   // s
  int stages = 1;  // P
  // Groups of two: with stage s-1 and with stage s+1 (null at the ends). Any rank order.
  std::shared_ptr<ProcessGroup> prev, next;
  // What travels between stages: micro-batch m's activation and its gradient have the shape
  // activation_shape(m) and these options.
  std::function<Shape(int m)> activation_shape;
  TensorOptions activation_options;
  bool one_f_one_b = true;  // false: GPipe
};

struct PipelineCallbacks {
  // Micro-batch m's forward. `input`: the previous stage's activation, a leaf that requires
  // grad (undefined on stage 0). Returns the activation to send on, shaped as the options say,
  // or on the last stage the micro-batch's loss, weighted as it should count in the step.
  std::function<StatusOr<Tensor>(int m, const Tensor& input)> forward;
  // Around each backward (optional): data parallelism's reducer (sync on the last).
  std::function<void(int m)> before_backward;
  std::function<Status(int m)> after_backward;
};

struct PipelineStats {
  double forward_seconds = 0;   // in the forward callbacks
  double backward_seconds = 0;  // in backward and its callbacks
  double compute_seconds = 0;   // the two together
  double wall_seconds = 0;      // the whole step: compute, and waiting for neighbours
  // The fraction of the step this stage waited: 1 - compute / wall.
  double bubble() const { return wall_seconds > 0 ? 1 - compute_seconds / wall_seconds : 0; }
};

// Runs the step's `micro_batches` micro-batches on this stage, leaving their gradients summed
// in the stage's parameters' .grad.
StatusOr<PipelineStats> RunPipelineStep(const PipelineOptions& options, int micro_batches,
                                        const PipelineCallbacks& callbacks);

// The theoretical bubble of both schedules: (P - 1) / (M + P - 1).
double TheoreticalBubble(int stages, int micro_batches);

}  // namespace trainyard::dist
