// Layer and batch normalisation (float32/float64) as torch.nn.functional.layer_norm and
// batch_norm, forward and backward through fused kernels (kernels/cpu/norm.h). weight and bias
// may be undefined (scale 1, shift 0).
#pragma once

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

// Normalises x over its trailing dims `normalized_shape` by their mean and biased variance;
// weight and bias have shape normalized_shape.
Tensor LayerNorm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                 const Tensor& bias = Tensor(), double eps = 1e-5);

// x: (N, C, *); running_mean, running_var, weight, bias: (C). Training normalises by the
// batch's per-channel mean and biased variance and, when the running stats are given, updates
// them in place (not recorded): running = (1 - momentum) * running + momentum * stat, with
// the unbiased variance. Otherwise the running stats normalise (and must be given).
Tensor BatchNorm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                 const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                 double eps = 1e-5);

}  // namespace trainyard::ops
