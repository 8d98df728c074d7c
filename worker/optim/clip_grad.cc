#include "worker/optim/clip_grad.h"

#include <cmath>
#include <limits>
#include <map>

#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/reduction.h"
#include "worker/optim/validate.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

// sum |g|^p over all grads (p finite), or max |g| (p infinite), as a scalar on their device:
// each gradient's part is written into one float64 tensor, reduced there.
Tensor Accumulate(const std::vector<Tensor>& grads, double p) {
  const Device device = grads[0].device();
  Tensor parts =
      Empty({static_cast<int64_t>(grads.size())}, Options(DType::kFloat64).set_device(device));
  for (size_t i = 0; i < grads.size(); ++i) {
    TY_CHECK(grads[i].device() == device)
        << "clip_grad_norm: gradients are on " << device.ToString() << " and "
        << grads[i].device().ToString();
    device::NormPowInto(ContiguousData(grads[i]), p, parts, static_cast<int64_t>(i));
  }
  // Reduced in float64 where the device computes in it (the CPU), else in float32, as PyTorch.
  if (!device::ComputesIn(device, DType::kFloat64)) parts = ConvertTo(parts, DType::kFloat32);
  return std::isinf(p) ? ops::Max(parts) : ops::Sum(parts);  // Max keeps a NaN
}

}  // namespace

Status ValidateClipGradNorm(double max_norm, double norm_type) {
  RETURN_IF_ERROR(internal::CheckAtLeast("clip_grad_norm", "max_norm", max_norm, 0));
  if (norm_type == std::numeric_limits<double>::infinity()) return OkStatus();
  return internal::CheckPositive("clip_grad_norm", "norm_type", norm_type);
}

Tensor GradSquaredSum(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return Scalar(0.0, Options(DType::kFloat64));
  NoGradGuard no_grad;
  return Accumulate(grads, 2);
}

Tensor ClipGradNorm(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  const Status valid = ValidateClipGradNorm(max_norm, norm_type);
  TY_CHECK(valid.ok()) << valid.message();
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return Scalar(0.0, Options(DType::kFloat64));
  NoGradGuard no_grad;
  const Tensor acc = Accumulate(grads, norm_type);
  const Tensor total = std::isinf(norm_type) || norm_type == 1 ? acc
                       : norm_type == 2                        ? ops::Sqrt(acc)
                                                               : ops::Pow(acc, 1 / norm_type);
  // min(max_norm / (total + 1e-6), 1), NaN kept (Clamp passes it through, as torch.clamp).
  const Tensor coef =
      ops::Clamp(ops::Div(Scalar(max_norm, total.options()), ops::AddScalar(total, 1e-6)),
                 -std::numeric_limits<double>::infinity(), 1);
  std::map<DType, Tensor> coef_as;  // coef in each gradient dtype, converted once
  for (const Tensor& g : grads) {
    Tensor& c = coef_as[g.dtype()];
    if (!c.defined()) c = ConvertTo(coef, g.dtype(), /*copy=*/false);
    ops::MulInPlace(g, c);
  }
  return total;
}

}  // namespace trainyard::optim
