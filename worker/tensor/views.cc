#include "worker/tensor/views.h"

namespace trainyard::views {

std::optional<Shape> ViewStrides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  // Walk chunks of old dims that are contiguous among themselves; each chunk must map onto a
  // run of new dims with the same element count (the rule PyTorch's view() follows).
  Shape out;
  out.resize(new_sizes.size());
  if (sizes.numel() == 0) return ContiguousStrides(new_sizes);
  if (sizes.size() == 0) {  // a scalar views as any all-ones shape
    for (int64_t i = 0; i < out.size(); ++i) out[i] = 1;
    return out;
  }
  int64_t view_d = new_sizes.size() - 1;
  int64_t chunk_base = strides.size() ? strides[strides.size() - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = sizes.size() - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape InferSize(const Shape& requested, int64_t numel, const char* op_name) {
  Shape out = requested;
  int64_t infer = -1, known = 1;
  for (int64_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TY_CHECK(infer < 0) << op_name << ": only one dimension can be -1 in " << requested;
      infer = i;
    } else {
      TY_CHECK(out[i] >= 0) << op_name << ": invalid size " << out[i] << " in " << requested;
      known *= out[i];
    }
  }
  if (infer >= 0) {
    TY_CHECK(known != 0 && numel % known == 0)
        << op_name << ": shape " << requested << " is invalid for " << numel << " elements";
    out[infer] = numel / known;
  }
  TY_CHECK(out.numel() == numel) << op_name << ": shape " << requested << " is invalid for "
                                 << numel << " elements";
  return out;
}

Tensor View(const Tensor& t, const Shape& new_sizes) {
  Shape sizes = InferSize(new_sizes, t.numel(), "view");
  auto strides = ViewStrides(t.shape(), t.strides(), sizes);
  TY_CHECK(strides.has_value()) << "view: cannot view shape " << t.shape() << " with strides "
                                << t.strides() << " as " << sizes << " without a copy; use Reshape";
  return MakeView(t, sizes, *strides, t.offset());
}

Tensor Transpose(const Tensor& t, int64_t d0, int64_t d1) {
  d0 = WrapDim(d0, t.dim(), "transpose");
  d1 = WrapDim(d1, t.dim(), "transpose");
  Shape sizes = t.shape(), strides = t.strides();
  if (t.dim() == 0) return MakeView(t, sizes, strides, t.offset());
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return MakeView(t, sizes, strides, t.offset());
}

Tensor Permute(const Tensor& t, const Shape& order) {
  TY_CHECK(order.size() == t.dim()) << "permute: order " << order << " has " << order.size()
                                    << " entries for a tensor of " << t.dim() << " dims";
  Shape sizes, strides;
  bool seen[kMaxDims] = {};
  for (int64_t i = 0; i < order.size(); ++i) {
    int64_t d = WrapDim(order[i], t.dim(), "permute");
    TY_CHECK(!seen[d]) << "permute: dim " << d << " repeats in " << order;
    seen[d] = true;
    sizes.push_back(t.shape()[d]);
    strides.push_back(t.strides()[d]);
  }
  return MakeView(t, sizes, strides, t.offset());
}

Tensor Slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = WrapDim(dim, t.dim(), "slice");
  TY_CHECK(step > 0) << "slice: step " << step << " must be positive";
  const int64_t n = t.shape()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = start < 0 ? 0 : (start > n ? n : start);
  end = end < start ? start : (end > n ? n : end);
  Shape sizes = t.shape(), strides = t.strides();
  sizes[dim] = (end - start + step - 1) / step;
  strides[dim] *= step;
  return MakeView(t, sizes, strides, t.offset() + start * t.strides()[dim]);
}

Tensor Narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  dim = WrapDim(dim, t.dim(), "narrow");
  const int64_t n = t.shape()[dim];
  if (start < 0) start += n;
  TY_CHECK(start >= 0 && length >= 0 && start + length <= n)
      << "narrow: start " << start << " and length " << length << " exceed dim " << dim
      << " of size " << n;
  return Slice(t, dim, start, start + length, 1);
}

Tensor Select(const Tensor& t, int64_t dim, int64_t index) {
  dim = WrapDim(dim, t.dim(), "select");
  const int64_t n = t.shape()[dim];
  TY_CHECK(index >= -n && index < n)
      << "select: index " << index << " is out of range for dim " << dim << " of size " << n;
  if (index < 0) index += n;
  Shape sizes = t.shape(), strides = t.strides();
  int64_t offset = t.offset() + index * strides[dim];
  sizes.erase(dim);
  strides.erase(dim);
  return MakeView(t, sizes, strides, offset);
}

Tensor Expand(const Tensor& t, const Shape& sizes) {
  TY_CHECK(sizes.size() >= t.dim())
      << "expand: cannot expand shape " << t.shape() << " to " << sizes << " (fewer dims)";
  Shape out_sizes, out_strides;
  out_sizes.resize(sizes.size());
  out_strides.resize(sizes.size());
  const int64_t lead = sizes.size() - t.dim();
  for (int64_t i = 0; i < sizes.size(); ++i) {
    int64_t si = i - lead;
    if (si < 0) {
      TY_CHECK(sizes[i] >= 0) << "expand: size -1 is not allowed for a new leading dim";
      out_sizes[i] = sizes[i];
      out_strides[i] = 0;
      continue;
    }
    int64_t have = t.shape()[si];
    int64_t want = sizes[i] == -1 ? have : sizes[i];
    TY_CHECK(have == want || have == 1) << "expand: dim " << si << " of shape " << t.shape()
                                        << " has size " << have << ", cannot expand to " << sizes;
    out_sizes[i] = want;
    out_strides[i] = (have == want) ? t.strides()[si] : 0;
  }
  return MakeView(t, out_sizes, out_strides, t.offset());
}

Tensor Squeeze(const Tensor& t) {
  Shape sizes, strides;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.shape()[i] == 1) continue;
    sizes.push_back(t.shape()[i]);
    strides.push_back(t.strides()[i]);
  }
  return MakeView(t, sizes, strides, t.offset());
}

Tensor Squeeze(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return MakeView(t, t.shape(), t.strides(), t.offset());
  dim = WrapDim(dim, t.dim(), "squeeze");
  if (t.shape()[dim] != 1) return MakeView(t, t.shape(), t.strides(), t.offset());
  Shape sizes = t.shape(), strides = t.strides();
  sizes.erase(dim);
  strides.erase(dim);
  return MakeView(t, sizes, strides, t.offset());
}

Tensor Unsqueeze(const Tensor& t, int64_t dim) {
  dim = WrapDim(dim, t.dim() + 1, "unsqueeze");
  Shape sizes = t.shape(), strides = t.strides();
  int64_t st = dim < t.dim() ? strides[dim] * sizes[dim] : 1;
  sizes.insert(dim, 1);
  strides.insert(dim, st);
  return MakeView(t, sizes, strides, t.offset());
}

}  // namespace trainyard::views
