// 2-D pooling (float32/float64) as in torch.nn.functional, with ceil_mode=false. Inputs are
// (N, C, H, W) or unbatched (C, H, W); outputs keep the leading dims and replace (H, W) by
// (oH, oW) = floor((H + 2 pad - dilation (kernel - 1) - 1) / stride) + 1. Padding may be at
// most half the kernel size. A stride of 0 means the kernel size (PyTorch's stride=None).
#pragma once

#include <cstdint>

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

// Max over each window; padding reads -inf. The gradient goes to the first maximum of each
// window (node "MaxPool2DWithIndicesBackward0").
Tensor MaxPool2d(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                 int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation = 1);
Tensor MaxPool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                 int64_t dilation = 1);

// Mean over each window (node "AvgPool2DBackward0"). With count_include_pad the divisor counts
// the padding inside the window, else only the input pixels.
Tensor AvgPool2d(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                 int64_t stride_w, int64_t pad_h, int64_t pad_w, bool count_include_pad = true);
Tensor AvgPool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                 bool count_include_pad = true);

// Output (i, j) is the mean of rows [floor(i H / out_h), ceil((i + 1) H / out_h)) and the
// columns likewise (node "AdaptiveAvgPool2DBackward0").
Tensor AdaptiveAvgPool2d(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor AdaptiveAvgPool2d(const Tensor& x, int64_t out_size);

}  // namespace trainyard::ops
