#include "worker/ops/conv.h"

#include "kernels/cpu/conv.h"
#include "worker/ops/common.h"
#include "worker/ops/record.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

void CheckConvOptions(const Conv2dOptions& o) {
  TY_CHECK(o.stride_h >= 1 && o.stride_w >= 1)
      << "conv2d: stride (" << o.stride_h << ", " << o.stride_w << ") must be at least 1";
  TY_CHECK(o.pad_h >= 0 && o.pad_w >= 0)
      << "conv2d: padding (" << o.pad_h << ", " << o.pad_w << ") must not be negative";
  TY_CHECK(o.dilation_h >= 1 && o.dilation_w >= 1)
      << "conv2d: dilation (" << o.dilation_h << ", " << o.dilation_w << ") must be at least 1";
  TY_CHECK(o.groups >= 1) << "conv2d: groups " << o.groups << " must be at least 1";
}

void CheckConvChannels(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t channels,
                       int64_t groups) {
  const int64_t out_channels = w.shape()[0];
  TY_CHECK(channels % groups == 0)
      << "conv2d: input channels " << channels << " are not divisible by groups " << groups;
  TY_CHECK(out_channels % groups == 0) << "conv2d: weight's out_channels " << out_channels
                                       << " are not divisible by groups " << groups;
  TY_CHECK(w.shape()[1] * groups == channels)
      << "conv2d: weight " << w.shape() << " with groups " << groups << " expects "
      << w.shape()[1] * groups << " input channels, but the input " << x.shape() << " has "
      << channels;
  TY_CHECK(!bias.defined() || (bias.dim() == 1 && bias.shape()[0] == out_channels))
      << "conv2d: bias must have shape [" << out_channels << "] (the weight's out_channels), got "
      << bias.shape();
}

// Validates the arguments and returns the kernel's view of them.
kc::Conv2dShape ConvShapeFor(const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Conv2dOptions& o) {
  TY_CHECK(x.dim() == 3 || x.dim() == 4)
      << "conv2d: input must be (N, C, H, W) or (C, H, W), got shape " << x.shape();
  TY_CHECK(w.dim() == 4) << "conv2d: weight must be (out_channels, in_channels / groups, kH, "
                         << "kW), got shape " << w.shape();
  CheckConvOptions(o);
  const int64_t lead = x.dim() - 3;  // 1 when batched
  CheckConvChannels(x, w, bias, x.shape()[lead], o.groups);
  kc::Conv2dShape s{lead == 1 ? x.shape()[0] : 1,
                    x.shape()[lead],
                    x.shape()[lead + 1],
                    x.shape()[lead + 2],
                    w.shape()[0],
                    o.groups,
                    w.shape()[2],
                    w.shape()[3],
                    o.stride_h,
                    o.stride_w,
                    o.pad_h,
                    o.pad_w,
                    o.dilation_h,
                    o.dilation_w};
  s.out_h = kc::WindowOutSize(s.height, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h);
  s.out_w = kc::WindowOutSize(s.width, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w);
  TY_CHECK(s.out_h > 0 && s.out_w > 0)
      << "conv2d: the dilated kernel (" << s.dilation_h * (s.kernel_h - 1) + 1 << ", "
      << s.dilation_w * (s.kernel_w - 1) + 1 << ") does not fit in the padded input ("
      << s.height + 2 * s.pad_h << ", " << s.width + 2 * s.pad_w << "); the output would be empty";
  return s;
}

// The cuDNN description of a convolution.
cuda::ConvDims CudaDims(const kc::Conv2dShape& s) {
  cuda::ConvDims d;
  d.n = s.batch, d.c = s.in_channels, d.h = s.height, d.w = s.width;
  d.k = s.out_channels, d.r = s.kernel_h, d.s = s.kernel_w;
  d.stride_h = s.stride_h, d.stride_w = s.stride_w, d.pad_h = s.pad_h, d.pad_w = s.pad_w;
  d.dil_h = s.dilation_h, d.dil_w = s.dilation_w, d.groups = s.groups;
  d.out_h = s.out_h, d.out_w = s.out_w;
  return d;
}

// gx or gweight through the kernels; xs and ws are the contiguous saved input and weight.
Tensor ConvInputGrad(const kc::Conv2dShape& s, const Tensor& gy, const Tensor& ws,
                     const Shape& x_shape) {
  Tensor gx = Empty(x_shape, gy.options());
  if (gy.device().is_cuda()) {
    CudaBackend().ConvBackwardData(ToScalarType(gy.dtype()), CudaDims(s), ws.raw_data(),
                                   gy.raw_data(), gx.raw_data(), ComputeStream(gy.device()));
    return gx;
  }
  TY_DISPATCH_FLOATING(gy.dtype(), "conv2d backward", [&] {
    kc::Conv2dBackwardInput<scalar_t>(s, gy.data<scalar_t>(), ws.data<scalar_t>(),
                                      gx.data<scalar_t>());
  });
  return gx;
}

Tensor ConvWeightGrad(const kc::Conv2dShape& s, const Tensor& gy, const Tensor& xs,
                      const Shape& w_shape) {
  Tensor gw = Empty(w_shape, gy.options());
  if (gy.device().is_cuda()) {
    CudaBackend().ConvBackwardFilter(ToScalarType(gy.dtype()), CudaDims(s), xs.raw_data(),
                                     gy.raw_data(), gw.raw_data(), ComputeStream(gy.device()));
    return gw;
  }
  TY_DISPATCH_FLOATING(gy.dtype(), "conv2d backward", [&] {
    kc::Conv2dBackwardWeight<scalar_t>(s, gy.data<scalar_t>(), xs.data<scalar_t>(),
                                       gw.data<scalar_t>());
  });
  return gw;
}

Tensor ConvBiasGrad(const kc::Conv2dShape& s, const Tensor& gy) {
  if (gy.device().is_cuda()) {
    // gy: (N, O, oH * oW) summed over N and the pixels, one reduction each.
    Tensor per_image = Empty({s.batch, s.out_channels}, gy.options());
    device::ReduceSum(gy, per_image, s.batch * s.out_channels, s.out_h * s.out_w, 1, 1);
    Tensor gb = Empty({s.out_channels}, gy.options());
    device::ReduceSum(per_image, gb, 1, s.batch, s.out_channels, 1);
    return gb;
  }
  Tensor gb = Empty({s.out_channels}, gy.options());
  TY_DISPATCH_FLOATING(gy.dtype(), "conv2d backward", [&] {
    kc::Conv2dBackwardBias<scalar_t>(s, gy.data<scalar_t>(), gb.data<scalar_t>());
  });
  return gb;
}

void ConvForwardCpu(const kc::Conv2dShape& s, const Tensor& xc, const Tensor& wc, const Tensor& bc,
                    const Tensor& out) {
  TY_DISPATCH_FLOATING(xc.dtype(), "conv2d", [&] {
    kc::Conv2dForward<scalar_t>(s, xc.data<scalar_t>(), wc.data<scalar_t>(),
                                bc.defined() ? bc.data<scalar_t>() : nullptr, out.data<scalar_t>());
  });
}

// Saves what each gradient needs: the weight for gx, the input for gweight.
void RecordConv(const kc::Conv2dShape& s, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& xc, const Tensor& wc, const Tensor& out) {
  auto node = Record("ConvolutionBackward0", {&x, &weight, &bias},
                     [s, x_shape = x.shape(), w_shape = weight.shape()](Node& n, GradList&& g) {
                       Tensor gy = ContiguousData(g[0]);
                       GradList r(3);
                       if (NeedsGrad(n, 0)) r[0] = ConvInputGrad(s, gy, n.saved(1), x_shape);
                       if (NeedsGrad(n, 1)) r[1] = ConvWeightGrad(s, gy, n.saved(0), w_shape);
                       if (NeedsGrad(n, 2)) r[2] = ConvBiasGrad(s, gy);
                       return r;
                     });
  node->Save(weight.requires_grad() ? xc : Tensor());
  node->Save(x.requires_grad() ? wc : Tensor());
  SetHistory(out, node);
}

}  // namespace

Tensor Conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dOptions& options) {
  const Tensor x = AutocastLow(x_in);
  const Tensor weight = AutocastLow(weight_in);
  const Tensor bias = AutocastLow(bias_in);
  CheckSameFloating(x, weight, "conv2d");
  if (bias.defined()) CheckSameFloating(x, bias, "conv2d");
  const kc::Conv2dShape s = ConvShapeFor(x, weight, bias, options);
  Tensor xc = ContiguousData(x);
  Tensor wc = ContiguousData(weight);
  Tensor bc = bias.defined() ? ContiguousData(bias) : Tensor();
  Shape out_shape = x.shape();  // (N, O, oH, oW) or (O, oH, oW)
  out_shape[x.dim() - 3] = s.out_channels;
  out_shape[x.dim() - 2] = s.out_h;
  out_shape[x.dim() - 1] = s.out_w;
  Tensor out = Empty(out_shape, x.options());
  if (x.device().is_cuda()) {
    CudaBackend().ConvForward(ToScalarType(x.dtype()), CudaDims(s), xc.raw_data(), wc.raw_data(),
                              out.raw_data(), ComputeStream(x.device()));
    if (bc.defined()) {
      // out (N, O, oH, oW) += bias viewed as (O, 1, 1).
      Tensor b3 = MakeView(bc, {s.out_channels, 1, 1}, {1, 0, 0}, bc.offset());
      device::Binary(kc::BinaryOp::kAdd, IterFor(out.shape(), {&out, &out, &b3}), out, out, b3, 1);
    }
  } else {
    ConvForwardCpu(s, xc, wc, bc, out);
  }
  if (ShouldRecord({&x, &weight, &bias})) RecordConv(s, x, weight, bias, xc, wc, out);
  return out;
}

Tensor Conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  return Conv2d(
      x, weight, bias,
      Conv2dOptions().set_stride(stride).set_padding(padding).set_dilation(dilation).set_groups(
          groups));
}

}  // namespace trainyard::ops
