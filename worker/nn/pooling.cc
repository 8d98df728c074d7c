#include "worker/nn/pooling.h"

#include "worker/ops/pool.h"
#include "worker/ops/views.h"

namespace trainyard::nn {

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding, int64_t dilation)
    : Module("MaxPool2d"),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      dilation_(dilation) {}

Tensor MaxPool2d::Forward(const Tensor& x) {
  return ops::MaxPool2d(x, kernel_, stride_, padding_, dilation_);
}

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding, bool count_include_pad)
    : Module("AvgPool2d"),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      count_include_pad_(count_include_pad) {}

Tensor AvgPool2d::Forward(const Tensor& x) {
  return ops::AvgPool2d(x, kernel_, stride_, padding_, count_include_pad_);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t out_h, int64_t out_w)
    : Module("AdaptiveAvgPool2d"), out_h_(out_h), out_w_(out_w) {}

Tensor AdaptiveAvgPool2d::Forward(const Tensor& x) {
  return ops::AdaptiveAvgPool2d(x, out_h_, out_w_);
}

Flatten::Flatten(int64_t start_dim, int64_t end_dim)
    : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

Tensor Flatten::Forward(const Tensor& x) { return ops::Flatten(x, start_dim_, end_dim_); }

}  // namespace trainyard::nn
