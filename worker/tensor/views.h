// Raw views: new sizes/strides/offset over the same storage, never recording a grad_fn.
// The differentiable forms (worker/ops/views.h) build on these. Every dim argument may be
// negative (counting from the end); bad arguments fail a TY_CHECK naming the op and values.
#pragma once

#include <optional>

#include "worker/tensor/tensor.h"

namespace trainyard::views {

// Strides for viewing (sizes, strides) as new_sizes without a copy, if possible.
std::optional<Shape> ViewStrides(const Shape& sizes, const Shape& strides, const Shape& new_sizes);
// Resolves one -1 entry and checks that the element count matches.
Shape InferSize(const Shape& requested, int64_t numel, const char* op_name);

Tensor View(const Tensor& t, const Shape& new_sizes);  // must be viewable without a copy
Tensor Transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor Permute(const Tensor& t, const Shape& order);
// Elements start, start+step, ... below end along dim (end is clamped to the size).
Tensor Slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor Narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor Select(const Tensor& t, int64_t dim, int64_t index);
// Size -1 keeps a dim; new leading dims may be added.
Tensor Expand(const Tensor& t, const Shape& sizes);
Tensor Squeeze(const Tensor& t);               // all size-1 dims
Tensor Squeeze(const Tensor& t, int64_t dim);  // one dim, if its size is 1
Tensor Unsqueeze(const Tensor& t, int64_t dim);

}  // namespace trainyard::views
