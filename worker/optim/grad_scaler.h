// GradScaler: dynamic loss scaling for float16 mixed precision, as torch.amp.GradScaler.
//
//   Tensor loss = ...;                               // forward under AutocastGuard(kFloat16)
//   autograd::Backward(scaler->Scale(loss));         // gradients come out multiplied by scale()
//   scaler->UnscaleAndCheck(params);                 // optional: true gradients, to clip them
//   optim::ClipGradNorm(params, 1.0);
//   const bool stepped = scaler->Step(*optimizer, params);  // skipped on inf or NaN
//   scaler->Update(/*found_inf=*/!stepped);
//
// Note [Loss scaling]: float16 holds magnitudes from about 6e-8 to 65504, so small gradients
// of float16 activations flush to zero. Multiplying the loss by S multiplies every gradient by
// S, lifting them into range; they are divided by S again before the optimizer sees them. Too
// large an S overflows to inf somewhere in backward: such a step is skipped (the weights and
// the optimizer state do not change) and S is multiplied by backoff_factor. After
// growth_interval consecutive finite steps S is multiplied by growth_factor, so S tracks the
// largest scale that does not overflow. bfloat16 has float32's range and needs no scaler.
//
// Data parallelism: call UnscaleAndCheck (or Step) after the gradient all-reduce has finished,
// so every rank sees the same averaged gradients and takes the same decision.
//
// Gradients may be float32 or float64 on any device: the scaler works through ops, not raw
// pointers, and reads back one scalar per UnscaleAndCheck. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "worker/optim/optimizer.h"
#include "worker/tensor/tensor.h"

namespace trainyard::optim {

struct GradScalerOptions {
  double init_scale = 65536;       // 2^16; finite and > 0
  double growth_factor = 2;        // finite and > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // consecutive finite steps before growing; >= 1
};

class GradScaler {
 public:
  // InvalidArgument "grad_scaler: <field> is <value>; it must be <rule>" for a bad option.
  static StatusOr<std::unique_ptr<GradScaler>> Create(const GradScalerOptions& options = {});
  static Status Validate(const GradScalerOptions& options);

  // loss * scale(), recorded by autograd (its backward multiplies the gradient by scale()).
  Tensor Scale(const Tensor& loss) const;

  // Divides every defined .grad of `params` by scale(), in place and under NoGradGuard, and
  // returns true when any of them holds an inf or NaN (found_inf). Call at most once between
  // two Updates (TY_CHECK: a second call would divide twice).
  bool UnscaleAndCheck(const std::vector<Tensor>& params);

  // Unscales `params` (unless UnscaleAndCheck already did since the last Update) and calls
  // optimizer.Step() when every gradient is finite. Returns whether it stepped. `params` are
  // the optimizer's parameters.
  bool Step(Optimizer& optimizer, const std::vector<Tensor>& params);

  // Ends a step: found_inf multiplies the scale by backoff_factor and restarts the count of
  // finite steps; otherwise the count grows, and on reaching growth_interval the scale is
  // multiplied by growth_factor (unless that would overflow float32, as in PyTorch) and the
  // count restarts.
  void Update(bool found_inf);

  // The factor Scale multiplies by.
  double scale() const { return scale_; }
  // Consecutive finite steps since the scale last changed (or since the last inf).
  int64_t growth_tracker() const { return growth_tracker_; }
  const GradScalerOptions& options() const { return options_; }

  // {"growth_tracker": int64 scalar, "scale": float64 scalar}, sorted by key, in the form
  // Optimizer::StateDict uses. LoadStateDict takes exactly these keys (a finite scale > 0, a
  // tracker >= 0) and restores both; on any error nothing changes. Call between steps.
  std::vector<NamedTensor> StateDict() const;
  Status LoadStateDict(const std::vector<NamedTensor>& state);

 private:
  explicit GradScaler(const GradScalerOptions& options)
      : options_(options), scale_(options.init_scale) {}

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::optional<bool> found_inf_;  // set by UnscaleAndCheck, cleared by Update
};

}  // namespace trainyard::optim
