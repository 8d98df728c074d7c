// Gradient clipping by total norm, as torch.nn.utils.clip_grad_norm_ (error_if_nonfinite=False).
#pragma once

#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::optim {

// The norm of all defined gradients of `params` taken together as one vector:
// (sum |g|^norm_type)^(1 / norm_type), or max |g| when norm_type is +infinity. If
// max_norm / (total + 1e-6) < 1, every such gradient is multiplied by that factor in place.
// Returns the total norm before clipping (0 when no gradient is defined). A NaN or infinite
// total is returned as is and poisons the gradients, as in PyTorch; callers that skip such
// steps check the result. Gradients are float32 or float64 on the CPU. Preconditions
// (TY_CHECK): ValidateClipGradNorm(max_norm, norm_type) is OK.
double ClipGradNorm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// InvalidArgument unless max_norm is finite and >= 0 and norm_type is finite and > 0 or
// +infinity. For job-spec settings, before training starts.
Status ValidateClipGradNorm(double max_norm, double norm_type);

}  // namespace trainyard::optim
