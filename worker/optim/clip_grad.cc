#include "worker/optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/optim/validate.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard::optim {
namespace {

// sum |g|^p over all grads (p finite), or max |g| (p infinite). Each gradient's part is
// written into one float64 tensor on its device, read back with one copy.
double Accumulate(const std::vector<Tensor>& grads, double p) {
  const bool inf = std::isinf(p);
  double acc = 0;
  if (grads.empty()) return acc;
  const Device device = grads[0].device();
  Tensor parts =
      Empty({static_cast<int64_t>(grads.size())}, Options(DType::kFloat64).set_device(device));
  for (size_t i = 0; i < grads.size(); ++i) {
    TY_CHECK(grads[i].device() == device)
        << "clip_grad_norm: gradients are on " << device.ToString() << " and "
        << grads[i].device().ToString();
    device::NormPowInto(ContiguousData(grads[i]), p, parts, static_cast<int64_t>(i));
  }
  for (double part : ToVector<double>(parts)) {
    if (inf) {
      acc = (part != part || acc != acc) ? std::numeric_limits<double>::quiet_NaN()
                                         : std::max(acc, part);
    } else {
      acc += part;
    }
  }
  return acc;
}

}  // namespace

Status ValidateClipGradNorm(double max_norm, double norm_type) {
  RETURN_IF_ERROR(internal::CheckAtLeast("clip_grad_norm", "max_norm", max_norm, 0));
  if (norm_type == std::numeric_limits<double>::infinity()) return OkStatus();
  return internal::CheckPositive("clip_grad_norm", "norm_type", norm_type);
}

double ClipGradNorm(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  const Status valid = ValidateClipGradNorm(max_norm, norm_type);
  TY_CHECK(valid.ok()) << valid.message();
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return 0;
  const double acc = Accumulate(grads, norm_type);
  const double total = std::isinf(norm_type) ? acc
                       : norm_type == 2      ? std::sqrt(acc)
                       : norm_type == 1      ? acc
                                             : std::pow(acc, 1 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1)) {  // NaN too: PyTorch multiplies by clamp(coef, max=1), which keeps NaN
    NoGradGuard no_grad;
    for (const Tensor& g : grads) ops::MulScalarInPlace(g, coef);
  }
  return total;
}

}  // namespace trainyard::optim
