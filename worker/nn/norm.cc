#include "worker/nn/norm.h"

#include "worker/ops/norm.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : Module("BatchNorm2d"), eps_(eps), momentum_(momentum) {
  TY_CHECK(num_features > 0) << "BatchNorm2d: num_features " << num_features << " must be positive";
  TY_CHECK(momentum >= 0 && momentum <= 1)
      << "BatchNorm2d: momentum " << momentum << " must lie in [0, 1]";
  weight_ = RegisterParameter("weight", Ones({num_features}));
  bias_ = RegisterParameter("bias", Zeros({num_features}));
  running_mean_ = RegisterBuffer("running_mean", Zeros({num_features}));
  running_var_ = RegisterBuffer("running_var", Ones({num_features}));
  num_batches_tracked_ =
      RegisterBuffer("num_batches_tracked", Zeros(Shape{}, Options(DType::kInt64)));
}

Tensor BatchNorm2d::Forward(const Tensor& x) {
  TY_CHECK(x.dim() == 4) << "BatchNorm2d: expected a 4-D input (N, C, H, W), got " << x.shape();
  if (!is_training()) {
    return ops::BatchNorm(x, running_mean_, running_var_, weight_, bias_, false, momentum_, eps_);
  }
  TY_CHECK(x.size(0) * x.size(2) * x.size(3) > 1)
      << "BatchNorm2d: expected more than 1 value per channel when training, got input size "
      << x.shape();
  Tensor y = ops::BatchNorm(x, running_mean_, running_var_, weight_, bias_, true, momentum_, eps_);
  if (num_batches_tracked_.device().is_cpu()) {
    num_batches_tracked_.data<int64_t>()[0] += 1;
  } else {  // device memory: counted through a host copy
    Tensor n = CopyToDevice(num_batches_tracked_, Device::Cpu());
    n.data<int64_t>()[0] += 1;
    CopyInto(num_batches_tracked_, n);
  }
  num_batches_tracked_.BumpVersion();
  return y;
}

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine,
                     bool bias)
    : Module("LayerNorm"), shape_(normalized_shape), eps_(eps) {
  TY_CHECK(!normalized_shape.empty()) << "LayerNorm: normalized_shape must not be empty";
  if (elementwise_affine) {
    weight_ = RegisterParameter("weight", Ones(shape_));
    if (bias) bias_ = RegisterParameter("bias", Zeros(shape_));
  }
}

Tensor LayerNorm::Forward(const Tensor& x) {
  return ops::LayerNorm(x, shape_, weight_, bias_, eps_);
}

}  // namespace trainyard::nn
