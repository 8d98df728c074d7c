// 2-D pooling over contiguous planes: x is `planes` images of (H, W) (N * C of an NCHW tensor),
// y is `planes` images of (oH, oW). Semantics follow PyTorch (ceil_mode=false). Planes are
// split over threads; each plane's outputs and gradients are computed by one thread in a fixed
// order, so results do not depend on the thread count.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

struct Pool2dShape {
  int64_t planes = 1;
  int64_t height = 1;
  int64_t width = 1;
  int64_t kernel_h = 1;
  int64_t kernel_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_h = 0;  // at most half the kernel size
  int64_t pad_w = 0;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
  int64_t out_h = 1;  // WindowOutSize(height, kernel_h, ...) (kernels/cpu/conv.h), positive
  int64_t out_w = 1;
};

// y = max over each window (padding reads -inf); argmax (same shape as y) is the flat index
// ih * W + iw within the plane of the first maximum (a NaN counts as the maximum), or -1 when
// the window holds no input pixel (then y is -inf).
template <typename T>
void MaxPool2dForward(const Pool2dShape& s, const T* x, T* y, int64_t* argmax);

// gx = gy routed to argmax (summed where windows share a maximum). Overwrites gx.
template <typename T>
void MaxPool2dBackward(const Pool2dShape& s, const T* gy, const int64_t* argmax, T* gx);

// y = window sum / divisor. The divisor is the window area clipped to the padded input when
// count_include_pad, else the number of input pixels in the window. Dilation must be 1.
template <typename T>
void AvgPool2dForward(const Pool2dShape& s, bool count_include_pad, const T* x, T* y);

// Overwrites gx.
template <typename T>
void AvgPool2dBackward(const Pool2dShape& s, bool count_include_pad, const T* gy, T* gx);

// Output (oh, ow) averages rows [floor(oh H / oH), ceil((oh + 1) H / oH)) and the columns
// likewise. Only planes, height, width, out_h and out_w of `s` are read.
template <typename T>
void AdaptiveAvgPool2dForward(const Pool2dShape& s, const T* x, T* y);

// Overwrites gx.
template <typename T>
void AdaptiveAvgPool2dBackward(const Pool2dShape& s, const T* gy, T* gx);

}  // namespace trainyard::kernels::cpu
