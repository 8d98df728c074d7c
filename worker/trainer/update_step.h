// UpdateStep: how a training step turns its gradients into new weights, one class per mode.
// MakeUpdateStep picks the mode once, from the spec; the Trainer then calls it without asking
// which it is.
//
//   plain   clip (spec.grad_clip_norm), optimizer step, zero_grad.
//   fp16    the same around a GradScaler (Note [Mixed precision] in trainer.h): the loss is
//           scaled before backward; Apply unscales the gradients and checks them for inf or
//           NaN, clips the true gradients, skips the optimizer on a non-finite one and updates
//           the scale.
//   ZeRO    stages 1 to 3: clip and step through dist::ZeroOptimizer over this rank's shard of
//           the state (the reducer reduce-scattered the gradients; the step all-gathers the
//           weights). With fp16 it unscales and checks the shards, and the ranks agree on
//           skipping (one all-reduce). It exists only with a process group; one process with
//           a zero_stage takes plain.
//
// Every mode saves and loads optimizer.safetensors in one form (Note [Optimizer state dict]):
// the unsharded optimizer's per-parameter entries, plus, for fp16, the scaler's under
// kScalerPrefix. A mode ignores the scaler entries it has no use for, so runs of one precision
// resume the checkpoints of another.
//
// Order of calls: LoadStateDict (on resume) before Start; Start once; then per step SetLr,
// ScaleLoss for each micro-batch and Apply; StateDict between steps. Not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/status.h"
#include "worker/nn/module.h"
#include "worker/optim/grad_scaler.h"
#include "worker/optim/optimizer.h"
#include "worker/tensor/tensor.h"
#include "worker/trainer/data_parallel.h"

namespace trainyard::trainer {

// The grad scaler's entries in optimizer.safetensors start with this ("grad_scaler.scale",
// "grad_scaler.growth_tracker").
inline constexpr const char* kScalerPrefix = "grad_scaler.";

// What one Apply did, for StepMetrics.
struct UpdateReport {
  // The total L2 gradient norm before clipping, when it is already on the host (ZeRO reads it
  // to clip); NaN otherwise.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  // The same norm still on the device (plain and fp16 with clipping), to be read with the loss
  // so that the host does not wait for it; undefined otherwise.
  Tensor device_grad_norm;
  double loss_scale = 0;  // fp16: the scale this step's backward used; 0 otherwise
  bool skipped = false;   // fp16: a gradient was inf or NaN; the weights and state are unchanged
};

class UpdateStep {
 public:
  virtual ~UpdateStep() = default;

  // Once data parallelism has started (`dp` is null in a one-process run; it must outlive this
  // object). ZeRO builds its sharded optimizer over dp's reducer here and loads the state a
  // LoadStateDict kept for it.
  virtual Status Start(DataParallel* dp) = 0;

  // The learning rate of the next Apply.
  virtual void SetLr(double lr) = 0;

  // The loss that backward starts from: fp16 multiplies it by the scale; others return it.
  virtual Tensor ScaleLoss(const Tensor& loss) const { return loss; }

  // After the step's backward and its gradient all-reduce: clips, updates the weights and
  // leaves the gradients zero (or, in a one-process run, undefined). A collective with ZeRO.
  virtual StatusOr<UpdateReport> Apply() = 0;

  // The optimizer.safetensors entries. `writer` is whether this rank writes the checkpoint:
  // ZeRO gathers on every rank (a collective); the others return nothing to a non-writer.
  virtual StatusOr<std::vector<optim::NamedTensor>> StateDict(bool writer) = 0;
  // Takes the entries of `checkpoint`'s optimizer.safetensors; errors name the checkpoint.
  virtual Status LoadStateDict(std::vector<optim::NamedTensor> state,
                               const std::string& checkpoint) = 0;

  // Bytes of optimizer state this rank holds (a 1/world_size share with ZeRO; 0 before Start).
  virtual int64_t state_bytes() const = 0;
};

// The spec's mode over `model`'s parameters (on their device by now). `data_parallel`: this
// process is one rank of a group (the gradients then stay views into the reducer's buckets,
// and a zero_stage shards the optimizer). `scaler` is used by precision fp16 only.
StatusOr<std::unique_ptr<UpdateStep>> MakeUpdateStep(const spec::JobSpec& spec,
                                                     const optim::GradScalerOptions& scaler,
                                                     nn::Module& model, bool data_parallel);
// The checks of MakeUpdateStep that need no model (a bad `scaler` for fp16), so that a trainer
// refuses them before it loads any data.
Status ValidateUpdateStep(const spec::JobSpec& spec, const optim::GradScalerOptions& scaler);

}  // namespace trainyard::trainer
