#include "worker/ops/norm.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "worker/ops/common.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/record.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

// Checks an optional per-feature tensor (weight, bias, running stats): undefined, or of x's
// dtype and the given shape.
void CheckParam(const Tensor& p, const Tensor& x, const Shape& shape, const char* what,
                const char* op_name) {
  if (!p.defined()) return;
  CheckSameFloating(x, p, op_name);
  TY_CHECK(p.shape() == shape) << op_name << ": " << what << " shape " << p.shape() << " must be "
                               << shape;
}

Tensor EmptyIf(bool needed, const Shape& shape, const Tensor& like) {
  return needed ? Empty(shape, like.options()) : Tensor();
}

void CheckLayerNorm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                    const Tensor& bias) {
  CheckFloating(x, "layer_norm");
  const int64_t k = normalized_shape.size();
  bool ok = k >= 1 && k <= x.dim();
  for (int64_t i = 0; ok && i < k; ++i) ok = x.shape()[x.dim() - k + i] == normalized_shape[i];
  TY_CHECK(ok) << "layer_norm: normalized_shape " << normalized_shape
               << " must be the trailing dims of the input shape " << x.shape();
  CheckParam(weight, x, normalized_shape, "weight", "layer_norm");
  CheckParam(bias, x, normalized_shape, "bias", "layer_norm");
}

// gy, x: (rows, n) contiguous; mean, rstd: (rows). Returns {gx, gweight, gbias}, each only
// where node input i needs it.
GradList LayerNormBackward(Node& node, const Tensor& gy, const Shape& normalized_shape) {
  const Tensor& x = node.saved(0);
  const Tensor& mean = node.saved(1);
  const Tensor& rstd = node.saved(2);
  const Tensor& weight = node.saved(3);
  const int64_t rows = mean.numel(), n = normalized_shape.numel();
  Tensor g = ContiguousData(gy);
  GradList r(3);
  r[0] = EmptyIf(NeedsGrad(node, 0), x.shape(), x);
  r[1] = EmptyIf(NeedsGrad(node, 1), normalized_shape, x);
  r[2] = EmptyIf(NeedsGrad(node, 2), normalized_shape, x);
  device::LayerNormBackward(x, g, mean, rstd, weight, r[0], r[1], r[2], rows, n);
  return r;
}

}  // namespace

Tensor LayerNorm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                 const Tensor& bias_in, double eps) {
  const Tensor x = AutocastF32(x_in);
  const Tensor weight = AutocastF32(weight_in);
  const Tensor bias = AutocastF32(bias_in);
  CheckLayerNorm(x, normalized_shape, weight, bias);
  const int64_t n = normalized_shape.numel();
  const int64_t rows = Shape(x.shape().data(), x.dim() - normalized_shape.size()).numel();
  Tensor xc = ContiguousData(x);  // (rows, n)
  Tensor w = weight.defined() ? ContiguousData(weight) : Tensor();
  Tensor b = bias.defined() ? ContiguousData(bias) : Tensor();
  Tensor y = Empty(x.shape(), x.options());
  const TensorOptions stats = x.options().set_dtype(device::StatsDType(x.device(), x.dtype()));
  Tensor mean = Empty({rows}, stats);
  Tensor rstd = Empty({rows}, stats);
  if (n > 0) device::LayerNormForward(xc, w, b, y, mean, rstd, rows, n, eps);
  if (ShouldRecord({&x, &weight, &bias})) {
    auto node = Record("NativeLayerNormBackward0", {&x, &weight, &bias},
                       [normalized_shape](Node& n, GradList&& g) {
                         return LayerNormBackward(n, g[0], normalized_shape);
                       });
    node->Save(xc);
    node->Save(mean);
    node->Save(rstd);
    node->Save(w);
    SetHistory(y, node);
  }
  return y;
}

namespace {

void CheckBatchNorm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                    const Tensor& weight, const Tensor& bias, bool training) {
  CheckFloating(x, "batch_norm");
  TY_CHECK(x.dim() >= 2) << "batch_norm: input must be (N, C, *), got shape " << x.shape();
  const Shape c{x.size(1)};
  CheckParam(running_mean, x, c, "running_mean", "batch_norm");
  CheckParam(running_var, x, c, "running_var", "batch_norm");
  CheckParam(weight, x, c, "weight", "batch_norm");
  CheckParam(bias, x, c, "bias", "batch_norm");
  TY_CHECK(running_mean.defined() == running_var.defined())
      << "batch_norm: running_mean and running_var must be given together";
  TY_CHECK(training || running_mean.defined())
      << "batch_norm: running_mean and running_var are required when not training";
  TY_CHECK(!training || x.numel() / std::max<int64_t>(x.size(1), 1) > 1)
      << "batch_norm: expected more than 1 value per channel when training, got input shape "
      << x.shape();
}

// Training: the batch's per-channel (mean, invstd), y written and the running stats updated in
// place (not recorded) by one kernel (cuDNN on CUDA where it takes the shape).
std::pair<Tensor, Tensor> BatchNormTrain(const Tensor& xc, const Tensor& w, const Tensor& b,
                                         const Tensor& y, const Tensor& running_mean,
                                         const Tensor& running_var, double momentum, double eps) {
  autograd::NoGradGuard no_grad;
  const int64_t c = xc.size(1), outer = xc.size(0), inner = xc.numel() / (outer * c);
  Tensor mean = Empty({c}, xc.options());
  Tensor invstd = Empty({c}, xc.options());
  // The kernels update contiguous running stats; strided ones through a copy.
  Tensor rm, rv;
  if (running_mean.defined()) rm = ContiguousData(running_mean), rv = ContiguousData(running_var);
  device::BatchNormTrainingForward(xc, w, b, y, rm, rv, momentum, eps, mean, invstd, outer, c,
                                   inner);
  auto written = [](const Tensor& running, const Tensor& updated) {
    if (!running.defined()) return;
    if (running.is_contiguous()) {
      running.BumpVersion();  // updated in place
    } else {
      CopyInPlace(running, updated);  // bumps the version
    }
  };
  written(running_mean, rm);
  written(running_var, rv);
  return {mean, invstd};
}

GradList BatchNormBackward(Node& node, const Tensor& gy, bool training, double eps) {
  const Tensor& x = node.saved(0);
  const Tensor& mean = node.saved(1);
  const Tensor& invstd = node.saved(2);
  const Tensor& weight = node.saved(3);
  const int64_t c = x.size(1), outer = x.size(0), inner = x.numel() / (outer * c);
  Tensor g = ContiguousData(gy);
  GradList r(3);
  r[0] = EmptyIf(NeedsGrad(node, 0), x.shape(), x);
  r[1] = EmptyIf(NeedsGrad(node, 1), {c}, x);
  r[2] = EmptyIf(NeedsGrad(node, 2), {c}, x);
  device::BatchNormBackward(x, g, mean, invstd, weight, r[0], r[1], r[2], outer, c, inner, training,
                            eps);
  return r;
}

}  // namespace

Tensor BatchNorm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                 const Tensor& weight_in, const Tensor& bias_in, bool training, double momentum,
                 double eps) {
  const Tensor x = AutocastF32(x_in);
  const Tensor weight = AutocastF32(weight_in);
  const Tensor bias = AutocastF32(bias_in);
  CheckBatchNorm(x, running_mean, running_var, weight, bias, training);
  Tensor y = Empty(x.shape(), x.options());
  if (x.numel() == 0) return y;
  Tensor xc = ContiguousData(x);  // (outer, c, inner)
  Tensor w = weight.defined() ? ContiguousData(weight) : Tensor();
  Tensor b = bias.defined() ? ContiguousData(bias) : Tensor();
  Tensor mean, invstd;
  if (training) {
    std::tie(mean, invstd) = BatchNormTrain(xc, w, b, y, running_mean, running_var, momentum, eps);
  } else {
    autograd::NoGradGuard no_grad;
    mean = ConvertTo(running_mean, xc.dtype(), /*force_copy=*/true);
    invstd = Rsqrt(AddScalar(running_var, eps));
    const int64_t c = x.size(1), outer = x.size(0), inner = x.numel() / (outer * c);
    device::BatchNormForward(xc, mean, invstd, w, b, y, outer, c, inner);
  }
  if (ShouldRecord({&x, &weight, &bias})) {
    auto node = Record("NativeBatchNormBackward0", {&x, &weight, &bias},
                       [training, eps](Node& n, GradList&& g) {
                         return BatchNormBackward(n, g[0], training, eps);
                       });
    node->Save(xc);
    node->Save(mean);
    node->Save(invstd);
    node->Save(w);
    SetHistory(y, node);
  }
  return y;
}

}  // namespace trainyard::ops
