// Joining, splitting and indexing ops. Index tensors are int64; out-of-range indices fail a
// TY_CHECK that names the index, the dim and its size.
#pragma once

#include <vector>

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

Tensor Cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor Stack(const std::vector<Tensor>& tensors, int64_t dim);
// Pieces of size split_size along dim (the last may be smaller); views of x.
std::vector<Tensor> Split(const Tensor& x, int64_t split_size, int64_t dim);
// Rows index[i] of x along dim (index is 1-D).
Tensor IndexSelect(const Tensor& x, int64_t dim, const Tensor& index);
// out[p] = x[p with p[dim] := index[p]]; index has x's number of dims.
Tensor Gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of self with src[p] added at self[p with p[dim] := index[p]].
Tensor ScatterAdd(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// x with `value` where mask (bool, broadcast to x) is true.
Tensor MaskedFill(const Tensor& x, const Tensor& mask, double value);
// int64 tensor of shape index.shape + [num_classes] (no gradient).
Tensor OneHot(const Tensor& index, int64_t num_classes);
// weight: (V, D); indices: int64 of any shape -> (*indices.shape, D).
Tensor Embedding(const Tensor& weight, const Tensor& indices);

// TY_CHECKs now that every index lies in [0, size) (a CUDA index is copied to the CPU first: for
// ops that compute on the CPU anyway; the others use device::CheckedIndices).
void CheckIndices(const Tensor& index, int64_t size, int64_t dim, const char* op_name);

}  // namespace trainyard::ops
