#include "worker/ops/indexing.h"

#include "kernels/cpu/indexing.h"
#include "worker/ops/common.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/record.h"
#include "worker/ops/views.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;
using device::IndexCheck;

void CheckIndices(const Tensor& index, int64_t size, int64_t dim, const char* op_name) {
  const Tensor c = index.device().is_cpu() ? index : CopyToDevice(index, Device::Cpu());
  device::CheckedIndices(c, IndexCheck{op_name, dim, size});
}

Tensor Cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TY_CHECK(!tensors.empty()) << "cat: expected at least one tensor";
  const Tensor& first = tensors[0];
  TY_CHECK(first.dim() > 0) << "cat: zero-dimensional tensors cannot be concatenated; use Stack";
  dim = WrapDim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TY_CHECK(t.dim() == first.dim() && t.dtype() == first.dtype())
        << "cat: tensor " << i << " has shape " << t.shape() << " and dtype "
        << DTypeName(t.dtype()) << "; expected " << first.dim() << " dims of "
        << DTypeName(first.dtype());
    for (int64_t d = 0; d < first.dim(); ++d)
      TY_CHECK(d == dim || t.shape()[d] == shape[d])
          << "cat: tensor " << i << " has shape " << t.shape() << ", expected " << shape
          << " except in dim " << dim;
    total += t.shape()[dim];
  }
  shape[dim] = total;
  Tensor out = Empty(shape, first.options());
  std::vector<int64_t> sizes;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    CopyInto(views::Narrow(out, dim, start, t.shape()[dim]), t);
    sizes.push_back(t.shape()[dim]);
    start += t.shape()[dim];
  }
  if (ShouldRecord(tensors)) {
    auto node = RecordList("CatBackward0", tensors, [dim, sizes](Node& n, GradList&& g) {
      GradList r(sizes.size());
      int64_t s = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (NeedsGrad(n, i)) r[i] = views::Narrow(g[0], dim, s, sizes[i]);
        s += sizes[i];
      }
      return r;
    });
    SetHistory(out, node);
  }
  return out;
}

Tensor Stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TY_CHECK(!tensors.empty()) << "stack: expected at least one tensor";
  dim = WrapDim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    TY_CHECK(t.shape() == tensors[0].shape())
        << "stack: shapes differ: " << t.shape() << " vs " << tensors[0].shape();
    parts.push_back(Unsqueeze(t, dim));
  }
  return Cat(parts, dim);
}

namespace {

// The tensor of `shape` whose slices along dim, split_size apart, are exactly the pieces' g, if
// they are views of one array laid out so (as the fused attention's gradients of a split qkv
// projection are): nothing to copy. Else undefined.
Tensor PiecesAsOne(const GradList& g, const Shape& shape, int64_t split_size, int64_t dim) {
  const Tensor& first = g[0];
  if (!first.defined()) return Tensor();
  for (size_t i = 0; i < g.size(); ++i) {
    const Tensor& t = g[i];
    const int64_t start = static_cast<int64_t>(i) * split_size;
    Shape piece = shape;
    piece[dim] = std::min(split_size, shape[dim] - start);
    if (!t.defined() || t.storage() != first.storage() || t.dtype() != first.dtype() ||
        t.shape() != piece || t.strides() != first.strides() ||
        t.offset() != first.offset() + start * first.stride(dim)) {
      return Tensor();
    }
  }
  return MakeView(first, shape, first.strides(), first.offset());
}

// One node for all the pieces (PyTorch's SplitBackward0): backward writes each piece's
// gradient into its slice of one gx (zeros where a piece got none), instead of one full-size
// zero-padded gradient per piece that the engine would then add up; or, where the gradients
// already lie so in one array (PiecesAsOne), hands that on.
void RecordSplit(const Tensor& x, const std::vector<Tensor>& pieces, int64_t split_size,
                 int64_t dim) {
  auto node = Record(
      "SplitBackward0", {&x},
      [shape = x.shape(), split_size, dim](Node&, GradList&& g) {
        const Tensor* any = nullptr;
        for (const Tensor& t : g)
          if (t.defined() && any == nullptr) any = &t;
        if (any == nullptr) return GradList{Tensor()};
        if (Tensor whole = PiecesAsOne(g, shape, split_size, dim); whole.defined()) {
          return GradList{whole};
        }
        Tensor gx = Empty(shape, any->options());
        for (size_t i = 0; i < g.size(); ++i) {
          const int64_t start = static_cast<int64_t>(i) * split_size;
          Tensor slice = views::Narrow(gx, dim, start, std::min(split_size, shape[dim] - start));
          if (g[i].defined()) {
            CopyInto(slice, g[i]);
          } else {
            FillInPlace(slice, 0);
          }
        }
        return GradList{gx};
      },
      static_cast<uint32_t>(pieces.size()));
  for (size_t i = 0; i < pieces.size(); ++i) SetHistory(pieces[i], node, static_cast<uint32_t>(i));
}

}  // namespace

std::vector<Tensor> Split(const Tensor& x, int64_t split_size, int64_t dim) {
  TY_CHECK(split_size > 0) << "split: split_size " << split_size << " must be positive";
  dim = WrapDim(dim, x.dim(), "split");
  const int64_t n = x.shape()[dim];
  if (n <= split_size) return {Narrow(x, dim, 0, n)};
  std::vector<Tensor> out;
  for (int64_t s = 0; s < n; s += split_size)
    out.push_back(views::Narrow(x, dim, s, std::min(split_size, n - s)));
  if (ShouldRecord({&x})) RecordSplit(x, out, split_size, dim);
  return out;
}

namespace {
// Moves dim to the front and makes it contiguous: rows of the result are x's slices.
Tensor DimToFront(const Tensor& x, int64_t dim) {
  return ContiguousData(dim == 0 ? x : views::Transpose(x, 0, dim));
}
}  // namespace

Tensor IndexSelect(const Tensor& x, int64_t dim, const Tensor& index) {
  CheckFloating(x, "index_select");
  TY_CHECK(index.dim() <= 1) << "index_select: index must be 1-D, got shape " << index.shape();
  dim = WrapDim(dim, x.dim(), "index_select");
  CheckSameDevice(x, index, "index_select");
  Tensor idx = device::CheckedIndices(index, IndexCheck{"index_select", dim, x.size(dim)});
  Tensor front = DimToFront(x, dim);
  Shape fshape = front.shape();
  const int64_t row = fshape[0] == 0 ? 0 : front.numel() / fshape[0];
  fshape[0] = idx.numel();
  Tensor out_front = Empty(fshape, x.options());
  device::IndexRows(front, row, idx, out_front);
  Tensor out = ContiguousData(dim == 0 ? out_front : views::Transpose(out_front, 0, dim));
  if (ShouldRecord({&x})) {
    auto node =
        Record("IndexSelectBackward0", {&x}, [shape = x.shape(), dim, row](Node& n, GradList&& g) {
          const Tensor& idx = n.saved(0);
          Shape fs = shape;
          std::swap(fs[0], fs[dim]);
          Tensor gx_front = Zeros(fs, g[0].options());
          Tensor gf = DimToFront(g[0], dim);
          device::IndexAddRows(gx_front, row, idx, gf);
          return GradList{dim == 0 ? gx_front : views::Transpose(gx_front, 0, dim)};
        });
    node->Save(idx);
    SetHistory(out, node);
  }
  return out;
}

namespace {
// Runs fn on CPU copies of `inputs` and moves its result to like's device: gather and
// scatter-add on CUDA tensors go through the CPU (no CUDA kernel yet; correct, not fast).
// Inputs are converted to f32 there when their dtype is one the CPU does not compute in.
template <typename F>
Tensor OnCpu(const Tensor& like, std::initializer_list<const Tensor*> inputs, const F& fn) {
  std::vector<Tensor> host;
  for (const Tensor* t : inputs) {
    if (t->device().is_cpu()) {
      host.push_back(*t);
      continue;
    }
    Tensor h = CopyToDevice(*t, Device::Cpu());
    host.push_back(IsFloating(h.dtype()) && !device::ComputesIn(h.device(), h.dtype())
                       ? ConvertTo(h, DType::kFloat32)
                       : h);
  }
  Tensor out = fn(host);
  return like.device().is_cpu() ? out : ConvertTo(CopyToDevice(out, like.device()), like.dtype());
}

void CheckGatherShapes(const Tensor& x, int64_t dim, const Tensor& index, const char* name) {
  TY_CHECK(index.dim() == x.dim())
      << name << ": index has " << index.dim() << " dims, input " << x.dim();
  for (int64_t d = 0; d < x.dim(); ++d)
    TY_CHECK(d == dim || index.shape()[d] <= x.shape()[d])
        << name << ": index shape " << index.shape() << " exceeds input shape " << x.shape()
        << " in dim " << d;
  CheckIndices(index, x.dim() == 0 ? 1 : x.shape()[dim], dim, name);
}
}  // namespace

Tensor Gather(const Tensor& x, int64_t dim, const Tensor& index) {
  CheckFloating(x, "gather");
  dim = WrapDim(dim, x.dim(), "gather");
  CheckGatherShapes(x, dim, index, "gather");
  Tensor idx = ContiguousData(index);
  Tensor out = OnCpu(x, {&x, &idx}, [&](const std::vector<Tensor>& t) {
    Tensor o = Empty(t[1].shape(), t[0].options());
    kc::ArrayRef xa{static_cast<int>(t[0].dim()), t[0].shape().data(), t[0].strides().data()};
    kc::ArrayRef ia{static_cast<int>(t[1].dim()), t[1].shape().data(), t[1].strides().data()};
    TY_DISPATCH_FLOATING(t[0].dtype(), "gather", [&] {
      kc::Gather<scalar_t>(t[0].data<scalar_t>(), xa, static_cast<int>(dim), t[1].data<int64_t>(),
                           ia, o.data<scalar_t>());
    });
    return o;
  });
  if (ShouldRecord({&x})) {
    auto node = Record("GatherBackward0", {&x}, [shape = x.shape(), dim](Node& n, GradList&& g) {
      return GradList{ScatterAdd(Zeros(shape, g[0].options()), dim, n.saved(0), g[0])};
    });
    node->Save(idx);
    SetHistory(out, node);
  }
  return out;
}

Tensor ScatterAdd(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  CheckSameFloating(self, src, "scatter_add");
  dim = WrapDim(dim, self.dim(), "scatter_add");
  CheckGatherShapes(self, dim, index, "scatter_add");
  TY_CHECK(src.shape() == index.shape())
      << "scatter_add: src shape " << src.shape() << " must equal index shape " << index.shape();
  Tensor idx = ContiguousData(index);
  Tensor s = ContiguousData(src);
  Tensor out = OnCpu(self, {&self, &idx, &s}, [&](const std::vector<Tensor>& t) {
    Tensor o = ConvertTo(t[0], t[0].dtype(), /*force_copy=*/true);
    kc::ArrayRef oa{static_cast<int>(o.dim()), o.shape().data(), o.strides().data()};
    kc::ArrayRef ia{static_cast<int>(t[1].dim()), t[1].shape().data(), t[1].strides().data()};
    TY_DISPATCH_FLOATING(t[0].dtype(), "scatter_add", [&] {
      kc::ScatterAdd<scalar_t>(o.data<scalar_t>(), oa, static_cast<int>(dim), t[1].data<int64_t>(),
                               ia, t[2].data<scalar_t>());
    });
    return o;
  });
  if (ShouldRecord({&self, &src})) {
    auto node = Record("ScatterAddBackward0", {&self, &src}, [dim](Node& n, GradList&& g) {
      GradList r(2);
      if (NeedsGrad(n, 0)) r[0] = g[0];
      if (NeedsGrad(n, 1)) r[1] = Gather(g[0], dim, n.saved(0));
      return r;
    });
    node->Save(idx);
    SetHistory(out, node);
  }
  return out;
}

Tensor MaskedFill(const Tensor& x, const Tensor& mask, double value) {
  CheckFloating(x, "masked_fill");
  TY_CHECK(mask.dtype() == DType::kBool || mask.dtype() == DType::kUInt8)
      << "masked_fill: mask must be bool, got " << DTypeName(mask.dtype());
  BroadcastShapes(x.shape(), mask.shape(), "masked_fill");
  Tensor fill = Scalar(value, x.options());
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = Where(mask, fill, x);
  }
  TY_CHECK(out.shape() == x.shape()) << "masked_fill: mask shape " << mask.shape()
                                     << " must broadcast to the input shape " << x.shape();
  if (ShouldRecord({&x})) {
    auto node = Record("MaskedFillBackward0", {&x}, [](Node& n, GradList&& g) {
      return GradList{Where(n.saved(0), ZerosLike(g[0]), g[0])};
    });
    node->Save(mask);
    SetHistory(out, node);
  }
  return out;
}

Tensor OneHot(const Tensor& index, int64_t num_classes) {
  TY_CHECK(num_classes > 0) << "one_hot: num_classes " << num_classes << " must be positive";
  CheckIndices(index, num_classes, index.dim(), "one_hot");
  Tensor idx = ContiguousData(index);
  Shape shape = idx.shape();
  shape.push_back(num_classes);
  if (!idx.device().is_cpu()) {
    return CopyToDevice(OneHot(CopyToDevice(idx, Device::Cpu()), num_classes), idx.device());
  }
  Tensor out = Zeros(shape, Options(DType::kInt64));
  int64_t* o = out.data<int64_t>();
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) o[i * num_classes + p[i]] = 1;
  return out;
}

Tensor Embedding(const Tensor& weight, const Tensor& indices) {
  CheckFloating(weight, "embedding");
  TY_CHECK(weight.dim() == 2) << "embedding: weight must be (num_embeddings, dim), got "
                              << weight.shape();
  CheckSameDevice(weight, indices, "embedding");
  Tensor idx = device::CheckedIndices(indices, IndexCheck{"embedding", 0, weight.size(0)});
  Tensor w = ContiguousData(weight);
  const int64_t d = weight.shape()[1];
  Shape shape = idx.shape();
  shape.push_back(d);
  Tensor out = Empty(shape, weight.options());
  device::IndexRows(w, d, idx, out);
  if (ShouldRecord({&weight})) {
    auto node =
        Record("EmbeddingBackward0", {&weight}, [wshape = weight.shape()](Node& n, GradList&& g) {
          const Tensor& idx = n.saved(0);
          Tensor gw = Zeros(wshape, g[0].options());
          Tensor gc = ContiguousData(g[0]);
          device::IndexAddRows(gw, wshape[1], idx, gc);
          return GradList{gw};
        });
    node->Save(idx);
    SetHistory(out, node);
  }
  return out;
}

}  // namespace trainyard::ops
