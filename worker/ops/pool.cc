#include "worker/ops/pool.h"

#include "kernels/cpu/conv.h"
#include "kernels/cpu/pool.h"
#include "worker/ops/common.h"
#include "worker/ops/record.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

struct Window {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};

// Checks that x is a non-empty (N, C, H, W) or (C, H, W) floating tensor; returns the kernel
// shape with planes, height and width filled in.
kc::Pool2dShape PlanesOf(const Tensor& x, const char* name) {
  CheckFloating(x, name);
  TY_CHECK(x.dim() == 3 || x.dim() == 4)
      << name << ": input must be (N, C, H, W) or (C, H, W), got shape " << x.shape();
  const int64_t lead = x.dim() - 3;
  TY_CHECK(x.shape()[lead] > 0 && x.shape()[lead + 1] > 0 && x.shape()[lead + 2] > 0)
      << name << ": input " << x.shape() << " must have non-empty (C, H, W)";
  kc::Pool2dShape s;
  s.planes = (lead == 1 ? x.shape()[0] : 1) * x.shape()[lead];
  s.height = x.shape()[lead + 1];
  s.width = x.shape()[lead + 2];
  return s;
}

void CheckWindow(const Window& w, const char* name) {
  TY_CHECK(w.kernel_h >= 1 && w.kernel_w >= 1)
      << name << ": kernel size (" << w.kernel_h << ", " << w.kernel_w << ") must be at least 1";
  TY_CHECK(w.stride_h >= 0 && w.stride_w >= 0)
      << name << ": stride (" << w.stride_h << ", " << w.stride_w
      << ") must be positive, or 0 for the kernel size";
  TY_CHECK(w.pad_h >= 0 && w.pad_w >= 0 && 2 * w.pad_h <= w.kernel_h && 2 * w.pad_w <= w.kernel_w)
      << name << ": padding (" << w.pad_h << ", " << w.pad_w
      << ") must be between 0 and half the kernel size (" << w.kernel_h << ", " << w.kernel_w
      << ")";
  TY_CHECK(w.dilation_h >= 1 && w.dilation_w >= 1)
      << name << ": dilation (" << w.dilation_h << ", " << w.dilation_w << ") must be at least 1";
}

// Validates the window and fills it into s (a stride of 0 becomes the kernel size), with the
// output size.
void SetWindow(const Window& w, const char* name, kc::Pool2dShape* s) {
  CheckWindow(w, name);
  s->kernel_h = w.kernel_h;
  s->kernel_w = w.kernel_w;
  s->stride_h = w.stride_h == 0 ? w.kernel_h : w.stride_h;
  s->stride_w = w.stride_w == 0 ? w.kernel_w : w.stride_w;
  s->pad_h = w.pad_h;
  s->pad_w = w.pad_w;
  s->dilation_h = w.dilation_h;
  s->dilation_w = w.dilation_w;
  s->out_h = kc::WindowOutSize(s->height, s->kernel_h, s->stride_h, s->pad_h, s->dilation_h);
  s->out_w = kc::WindowOutSize(s->width, s->kernel_w, s->stride_w, s->pad_w, s->dilation_w);
  TY_CHECK(s->out_h > 0 && s->out_w > 0)
      << name << ": the output would be empty: the padded input (" << s->height + 2 * s->pad_h
      << ", " << s->width + 2 * s->pad_w << ") is smaller than the dilated kernel ("
      << s->dilation_h * (s->kernel_h - 1) + 1 << ", " << s->dilation_w * (s->kernel_w - 1) + 1
      << ")";
}

// x's shape with (H, W) replaced by the pooled size.
Shape PooledShape(const Tensor& x, const kc::Pool2dShape& s) {
  Shape shape = x.shape();
  shape[x.dim() - 2] = s.out_h;
  shape[x.dim() - 1] = s.out_w;
  return shape;
}

}  // namespace

Tensor MaxPool2d(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                 int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation) {
  kc::Pool2dShape s = PlanesOf(x, "max_pool2d");
  SetWindow({kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation, dilation},
            "max_pool2d", &s);
  Tensor xc = ContiguousData(x);
  Tensor out = Empty(PooledShape(x, s), x.options());
  Tensor argmax = Empty(out.shape(), Options(DType::kInt64).set_device(x.device()));
  device::MaxPool2dForward(s, xc, out, argmax);
  if (ShouldRecord({&x})) {
    auto node = Record("MaxPool2DWithIndicesBackward0", {&x},
                       [s, x_shape = x.shape()](Node& n, GradList&& g) {
                         Tensor gy = ContiguousData(g[0]);
                         Tensor gx = Empty(x_shape, gy.options());
                         device::MaxPool2dBackward(s, gy, n.saved(0), gx);
                         return GradList{gx};
                       });
    node->Save(argmax);
    SetHistory(out, node);
  }
  return out;
}

Tensor MaxPool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                 int64_t dilation) {
  return MaxPool2d(x, kernel, kernel, stride, stride, padding, padding, dilation);
}

Tensor AvgPool2d(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                 int64_t stride_w, int64_t pad_h, int64_t pad_w, bool count_include_pad) {
  kc::Pool2dShape s = PlanesOf(x, "avg_pool2d");
  SetWindow({kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, 1, 1}, "avg_pool2d", &s);
  Tensor xc = ContiguousData(x);
  Tensor out = Empty(PooledShape(x, s), x.options());
  device::AvgPool2dForward(s, count_include_pad, xc, out);
  if (ShouldRecord({&x})) {
    auto node = Record("AvgPool2DBackward0", {&x},
                       [s, count_include_pad, x_shape = x.shape()](Node&, GradList&& g) {
                         Tensor gy = ContiguousData(g[0]);
                         Tensor gx = Empty(x_shape, gy.options());
                         device::AvgPool2dBackward(s, count_include_pad, gy, gx);
                         return GradList{gx};
                       });
    SetHistory(out, node);
  }
  return out;
}

Tensor AvgPool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                 bool count_include_pad) {
  return AvgPool2d(x, kernel, kernel, stride, stride, padding, padding, count_include_pad);
}

Tensor AdaptiveAvgPool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  kc::Pool2dShape s = PlanesOf(x, "adaptive_avg_pool2d");
  TY_CHECK(out_h >= 1 && out_w >= 1)
      << "adaptive_avg_pool2d: output size (" << out_h << ", " << out_w << ") must be at least 1";
  s.out_h = out_h;
  s.out_w = out_w;
  Tensor xc = ContiguousData(x);
  Tensor out = Empty(PooledShape(x, s), x.options());
  device::AdaptiveAvgPool2dForward(s, xc, out);
  if (ShouldRecord({&x})) {
    auto node =
        Record("AdaptiveAvgPool2DBackward0", {&x}, [s, x_shape = x.shape()](Node&, GradList&& g) {
          Tensor gy = ContiguousData(g[0]);
          Tensor gx = Empty(x_shape, gy.options());
          device::AdaptiveAvgPool2dBackward(s, gy, gx);
          return GradList{gx};
        });
    SetHistory(out, node);
  }
  return out;
}

Tensor AdaptiveAvgPool2d(const Tensor& x, int64_t out_size) {
  return AdaptiveAvgPool2d(x, out_size, out_size);
}

}  // namespace trainyard::ops
