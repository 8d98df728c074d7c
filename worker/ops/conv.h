// 2-D convolution (float32/float64) as torch.nn.functional.conv2d: a cross-correlation of
// x (N, C, H, W) or unbatched (C, H, W) with weight (O, C / groups, kH, kW), plus bias (O).
// Differentiable in x, weight and bias (node "ConvolutionBackward0").
#pragma once

#include <cstdint>

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

struct Conv2dOptions {
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_h = 0;  // zeros added on each side
  int64_t pad_w = 0;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
  int64_t groups = 1;  // divides C and O; each group of O / groups outputs sees C / groups inputs

  Conv2dOptions& set_stride(int64_t s) { return stride_h = stride_w = s, *this; }
  Conv2dOptions& set_stride(int64_t h, int64_t w) { return stride_h = h, stride_w = w, *this; }
  Conv2dOptions& set_padding(int64_t p) { return pad_h = pad_w = p, *this; }
  Conv2dOptions& set_padding(int64_t h, int64_t w) { return pad_h = h, pad_w = w, *this; }
  Conv2dOptions& set_dilation(int64_t d) { return dilation_h = dilation_w = d, *this; }
  Conv2dOptions& set_dilation(int64_t h, int64_t w) {
    return dilation_h = h, dilation_w = w, *this;
  }
  Conv2dOptions& set_groups(int64_t g) { return groups = g, *this; }
};

// y: (N, O, oH, oW) with oH = floor((H + 2 pad_h - dilation_h (kH - 1) - 1) / stride_h) + 1,
// and likewise oW; (O, oH, oW) for an unbatched x. `bias` may be undefined (no bias).
Tensor Conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});
// Square stride, padding and dilation.
Tensor Conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

}  // namespace trainyard::ops
