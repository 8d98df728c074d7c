#include "worker/nn/activation.h"

#include "worker/ops/activation.h"

namespace trainyard::nn {

Tensor ReLU::Forward(const Tensor& x) { return ops::Relu(x); }

GELU::GELU(std::string approximate) : Module("GELU"), approximate_(std::move(approximate)) {
  TY_CHECK(approximate_ == "none" || approximate_ == "tanh")
      << "GELU: approximate \"" << approximate_ << "\" must be \"none\" or \"tanh\"";
}

Tensor GELU::Forward(const Tensor& x) { return ops::Gelu(x, approximate_); }

Tensor Tanh::Forward(const Tensor& x) { return ops::Tanh(x); }

Tensor Sigmoid::Forward(const Tensor& x) { return ops::Sigmoid(x); }

Tensor SiLU::Forward(const Tensor& x) { return ops::Silu(x); }

}  // namespace trainyard::nn
