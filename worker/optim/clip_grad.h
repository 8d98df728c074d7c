// Gradient clipping by total norm, as torch.nn.utils.clip_grad_norm_ (error_if_nonfinite=False).
#pragma once

#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::optim {

// The norm of all defined gradients of `params` taken together as one vector:
// (sum |g|^norm_type)^(1 / norm_type), or max |g| when norm_type is +infinity; every such
// gradient is multiplied in place by min(max_norm / (total + 1e-6), 1). Returns the total norm
// before clipping as a scalar on the gradients' device (float64 on the CPU, float32 on a GPU,
// which has no float64 arithmetic; 0 on the CPU when no gradient is defined). As in PyTorch,
// everything stays on the device: nothing here makes the host wait for the gradients, and the
// caller reads the norm when it needs the value. A NaN or infinite total poisons the gradients, as
// in PyTorch; callers that skip such steps check the result. Gradients are floating, all on one
// device. Preconditions (TY_CHECK): ValidateClipGradNorm(max_norm, norm_type) is OK.
Tensor ClipGradNorm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// The sum of squares of every defined gradient of `params`, as ClipGradNorm's total with
// norm_type 2 before its square root (a scalar on their device; 0 on the CPU when none): for a
// norm over gradients that live in several processes (pipeline stages), summed across them.
Tensor GradSquaredSum(const std::vector<Tensor>& params);

// InvalidArgument unless max_norm is finite and >= 0 and norm_type is finite and > 0 or
// +infinity. For job-spec settings, before training starts.
Status ValidateClipGradNorm(double max_norm, double norm_type);

}  // namespace trainyard::optim
