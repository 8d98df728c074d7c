// 2-D convolution (cross-correlation, as in PyTorch) by im2col + GEMM, and its gradients.
// Arrays are contiguous: x (N, C, H, W), weight (O, C / groups, kH, kW), y (N, O, oH, oW).
// Every output element is written by one thread in a fixed order, so results do not depend
// on the thread count. Also the sliding-window geometry that the pooling kernels share.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// Output size of a window sweep: floor((in + 2 pad - dilation (kernel - 1) - 1) / stride) + 1.
// Zero or negative when the dilated kernel does not fit in the padded input.
int64_t WindowOutSize(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation);

// The outputs o in [0, out) whose input position o * stride + offset lies in [0, in): [lo, hi)
// with lo <= hi. stride >= 1.
struct OutRange {
  int64_t lo = 0;
  int64_t hi = 0;
};
OutRange ValidOutputs(int64_t out, int64_t stride, int64_t offset, int64_t in);

struct Conv2dShape {
  int64_t batch = 1;
  int64_t in_channels = 1;
  int64_t height = 1;
  int64_t width = 1;
  int64_t out_channels = 1;
  int64_t groups = 1;  // divides in_channels and out_channels
  int64_t kernel_h = 1;
  int64_t kernel_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_h = 0;
  int64_t pad_w = 0;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
  int64_t out_h = 1;  // WindowOutSize(height, kernel_h, ...), positive
  int64_t out_w = 1;
};

// One image: col ((channels * kH * kW), (oH * oW)) from im (channels, H, W), zeros where the
// window reads padding. Row (c, ki, kj) holds im[c, oh * sh - ph + ki * dh, ow * sw - pw + kj *
// dw].
template <typename T>
void Im2Col(const Conv2dShape& s, int64_t channels, const T* im, T* col);

// The adjoint of Im2Col: im (channels, H, W) = sum of the col entries that read each pixel.
// Overwrites im.
template <typename T>
void Col2Im(const Conv2dShape& s, int64_t channels, const T* col, T* im);

// y = conv(x, weight) + bias; bias (O) may be null. Overwrites y.
template <typename T>
void Conv2dForward(const Conv2dShape& s, const T* x, const T* weight, const T* bias, T* y);

// gx (N, C, H, W) from gy (N, O, oH, oW). Overwrites gx.
template <typename T>
void Conv2dBackwardInput(const Conv2dShape& s, const T* gy, const T* weight, T* gx);

// gweight (O, C / groups, kH, kW) = sum over the batch, in a fixed order. Overwrites gweight.
template <typename T>
void Conv2dBackwardWeight(const Conv2dShape& s, const T* gy, const T* x, T* gweight);

// gbias (O) = sum of gy (N, O, oH, oW) over the batch and the pixels: per channel, each
// image's plane is summed (SumContiguous) and the plane sums are added in double in batch order.
template <typename T>
void Conv2dBackwardBias(const Conv2dShape& s, const T* gy, T* gbias);

}  // namespace trainyard::kernels::cpu
