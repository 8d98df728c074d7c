#include "worker/optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/optim.h"
#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/optim/validate.h"

namespace trainyard::optim {
namespace {

namespace kc = kernels::cpu;

// sum |g|^p over all grads (p finite), or max |g| (p infinite).
double Accumulate(const std::vector<Tensor>& grads, double p) {
  const bool inf = std::isinf(p);
  double acc = 0;
  for (const Tensor& g : grads) {
    const Tensor c = ContiguousData(g);
    double part = 0;
    TY_DISPATCH_FLOATING(c.dtype(), "clip_grad_norm", [&] {
      part = inf ? kc::MaxAbs(c.data<scalar_t>(), c.numel())
                 : kc::SumAbsPow(c.data<scalar_t>(), c.numel(), p);
    });
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
