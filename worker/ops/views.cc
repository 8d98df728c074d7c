#include "worker/ops/views.h"

#include "worker/ops/common.h"
#include "worker/ops/record.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard::ops {

using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

// Records a view-like op whose gradient is grad reshaped to the input's shape.
Tensor RecordReshape(const Tensor& x, Tensor out, const char* name) {
  if (ShouldRecord({&x})) {
    auto node = Record(name, {&x}, [shape = x.shape()](Node&, GradList&& g) {
      return GradList{Reshape(g[0], shape)};
    });
    SetHistory(out, node);
  }
  return out;
}

}  // namespace

Tensor Reshape(const Tensor& x, const Shape& shape) {
  Shape sizes = views::InferSize(shape, x.numel(), "reshape");
  auto strides = views::ViewStrides(x.shape(), x.strides(), sizes);
  Tensor out;
  if (strides) {
    out = MakeView(x, sizes, *strides, x.offset());
  } else {
    Tensor c = ContiguousData(x);
    out = MakeView(c, sizes, ContiguousStrides(sizes), c.offset());
  }
  return RecordReshape(x, out, "ViewBackward0");
}

Tensor View(const Tensor& x, const Shape& shape) {
  return RecordReshape(x, views::View(x, shape), "ViewBackward0");
}

Tensor Flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return Reshape(x, Shape{1});
  start_dim = WrapDim(start_dim, x.dim(), "flatten");
  end_dim = WrapDim(end_dim, x.dim(), "flatten");
  TY_CHECK(start_dim <= end_dim) << "flatten: start_dim " << start_dim << " is after end_dim "
                                 << end_dim;
  Shape shape;
  for (int64_t i = 0; i < start_dim; ++i) shape.push_back(x.shape()[i]);
  int64_t prod = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) prod *= x.shape()[i];
  shape.push_back(prod);
  for (int64_t i = end_dim + 1; i < x.dim(); ++i) shape.push_back(x.shape()[i]);
  return Reshape(x, shape);
}

Tensor Transpose(const Tensor& x, int64_t d0, int64_t d1) {
  Tensor out = views::Transpose(x, d0, d1);
  if (ShouldRecord({&x})) {
    auto node = Record("TransposeBackward0", {&x},
                       [d0, d1](Node&, GradList&& g) { return GradList{Transpose(g[0], d0, d1)}; });
    SetHistory(out, node);
  }
  return out;
}

Tensor Permute(const Tensor& x, const Shape& order) {
  Tensor out = views::Permute(x, order);
  if (ShouldRecord({&x})) {
    Shape inverse;
    inverse.resize(order.size());
    for (int64_t i = 0; i < order.size(); ++i) inverse[WrapDim(order[i], x.dim(), "permute")] = i;
    auto node = Record("PermuteBackward0", {&x},
                       [inverse](Node&, GradList&& g) { return GradList{Permute(g[0], inverse)}; });
    SetHistory(out, node);
  }
  return out;
}

namespace {
// Backward of views that pick elements: scatter the gradient into zeros of the input's shape
// through the same view.
template <typename ViewFn>
Tensor RecordPick(const Tensor& x, Tensor out, const char* name, ViewFn view) {
  if (ShouldRecord({&x})) {
    auto node = Record(name, {&x}, [shape = x.shape(), view](Node&, GradList&& g) {
      Tensor gx = Zeros(shape, g[0].options());
      CopyInto(view(gx), g[0]);
      return GradList{gx};
    });
    SetHistory(out, node);
  }
  return out;
}
}  // namespace

Tensor Slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return RecordPick(x, views::Slice(x, dim, start, end, step), "SliceBackward0",
                    [=](const Tensor& t) { return views::Slice(t, dim, start, end, step); });
}

Tensor Narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Tensor out = views::Narrow(x, dim, start, length);
  int64_t d = WrapDim(dim, x.dim(), "narrow");
  int64_t s = start < 0 ? start + x.shape()[d] : start;
  return RecordPick(x, out, "SliceBackward0",
                    [=](const Tensor& t) { return views::Slice(t, d, s, s + length, 1); });
}

Tensor Select(const Tensor& x, int64_t dim, int64_t index) {
  return RecordPick(x, views::Select(x, dim, index), "SelectBackward0",
                    [=](const Tensor& t) { return views::Select(t, dim, index); });
}

Tensor Expand(const Tensor& x, const Shape& shape) {
  Tensor out = views::Expand(x, shape);
  if (ShouldRecord({&x})) {
    auto node = Record("ExpandBackward0", {&x}, [s = x.shape()](Node&, GradList&& g) {
      return GradList{SumToShape(g[0], s)};
    });
    SetHistory(out, node);
  }
  return out;
}

Tensor Squeeze(const Tensor& x) { return RecordReshape(x, views::Squeeze(x), "SqueezeBackward0"); }
Tensor Squeeze(const Tensor& x, int64_t dim) {
  return RecordReshape(x, views::Squeeze(x, dim), "SqueezeBackward1");
}
Tensor Unsqueeze(const Tensor& x, int64_t dim) {
  return RecordReshape(x, views::Unsqueeze(x, dim), "UnsqueezeBackward0");
}

Tensor Clone(const Tensor& x) {
  Tensor out = ConvertTo(x, x.dtype(), /*force_copy=*/true);
  if (ShouldRecord({&x})) {
    auto node = Record("CloneBackward0", {&x}, [](Node&, GradList&& g) { return GradList{g[0]}; });
    SetHistory(out, node);
  }
  return out;
}

Tensor Contiguous(const Tensor& x) { return x.is_contiguous() ? x : Clone(x); }

Tensor To(const Tensor& x, DType dtype) {
  if (dtype == x.dtype()) return x;
  Tensor out = ConvertTo(x, dtype);
  if (ShouldRecord({&x}) && IsFloating(dtype)) {
    auto node = Record("ToCopyBackward0", {&x}, [from = x.dtype()](Node&, GradList&& g) {
      return GradList{ConvertTo(g[0], from)};
    });
    SetHistory(out, node);
  }
  return out;
}

StatusOr<Tensor> To(const Tensor& x, Device device) {
  RETURN_IF_ERROR(CheckDeviceAvailable(device));
  if (device == x.device()) return x;
  Tensor out = CopyToDevice(x, device);
  if (ShouldRecord({&x})) {
    auto node = Record("ToCopyBackward0", {&x}, [from = x.device()](Node&, GradList&& g) {
      return GradList{CopyToDevice(g[0], from)};
    });
    SetHistory(out, node);
  }
  return out;
}

}  // namespace trainyard::ops
