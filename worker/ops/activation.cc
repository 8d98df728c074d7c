#include "worker/ops/activation.h"

#include "kernels/cpu/elementwise.h"
#include "worker/ops/elementwise.h"

namespace trainyard::ops {

using kernels::cpu::UnaryOp;

Tensor Relu(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(UnaryOp::kRelu), x, 0, 0, "ReluBackward0", false);
}

Tensor Gelu(const Tensor& x, const std::string& approximate) {
  TY_CHECK(approximate == "none" || approximate == "tanh")
      << "gelu: approximate is \"" << approximate << "\"; allowed: \"none\", \"tanh\"";
  UnaryOp op = approximate == "tanh" ? UnaryOp::kGeluTanh : UnaryOp::kGeluErf;
  return internal::UnaryOp(static_cast<int>(op), x, 0, 0, "GeluBackward0", false);
}

Tensor Sigmoid(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(UnaryOp::kSigmoid), x, 0, 0, "SigmoidBackward0", true);
}

Tensor Tanh(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(UnaryOp::kTanh), x, 0, 0, "TanhBackward0", true);
}

Tensor Silu(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(UnaryOp::kSilu), x, 0, 0, "SiluBackward0", false);
}

}  // namespace trainyard::ops
