// Activation functions (float32/float64), forward and backward.
#pragma once

#include <string>

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

Tensor Relu(const Tensor& x);
// approximate: "none" (exact, with erf) or "tanh", as in torch.nn.functional.gelu.
Tensor Gelu(const Tensor& x, const std::string& approximate = "none");
Tensor Sigmoid(const Tensor& x);
Tensor Tanh(const Tensor& x);
Tensor Silu(const Tensor& x);

}  // namespace trainyard::ops
