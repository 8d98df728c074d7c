// Differentiable views and layout ops. Views share storage with their input (see
// worker/tensor/views.h for the raw forms); their backward maps the gradient back to the
// input's shape.
#pragma once

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

// A view when the layout allows, else a contiguous copy (like torch.reshape). One size may be -1.
Tensor Reshape(const Tensor& x, const Shape& shape);
// Must be viewable without a copy (TY_CHECK otherwise), like torch.Tensor.view.
Tensor View(const Tensor& x, const Shape& shape);
Tensor Flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor Transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor Permute(const Tensor& x, const Shape& order);
Tensor Slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor Narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor Select(const Tensor& x, int64_t dim, int64_t index);
Tensor Expand(const Tensor& x, const Shape& shape);
Tensor Squeeze(const Tensor& x);
Tensor Squeeze(const Tensor& x, int64_t dim);
Tensor Unsqueeze(const Tensor& x, int64_t dim);
// x itself when contiguous, else a contiguous copy (differentiable).
Tensor Contiguous(const Tensor& x);
Tensor Clone(const Tensor& x);
// Converts to `dtype` (differentiable between floating types). Returns x if nothing changes.
Tensor To(const Tensor& x, DType dtype);
// Device transfer: FailedPrecondition where the device is not available.
StatusOr<Tensor> To(const Tensor& x, Device device);

}  // namespace trainyard::ops
