// Gather / scatter-add along one dim, and row gathers. Arrays are described by shape and
// strides in elements (up to kMaxDims dims); index arrays hold int64 positions that the caller
// has checked to lie in [0, size of dim).
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// A range check of int64 indices: what is valid, and what to say when a value is not. On a
// CUDA device the check runs without the host waiting for it (kernels/cuda/backend.h
// CheckIndices, Note [Deferred index checks] in worker/tensor/device_kernels_nn.cc).
struct IndexCheck {
  const char* op = nullptr;  // the op's name, with static storage (a fault record keeps it)
  int64_t dim = 0;           // the dim indexed, or -1 for class targets
  int64_t size = 0;          // valid: [0, size) ...
  bool has_ignore = false;   // ... and ignore_index, when has_ignore
  int64_t ignore_index = 0;
};

// The position of the first of index[0, n) that `check` rejects, or -1. When `out` is not
// null, out[i] = index[i] where valid, else the value kernels can take instead:
// ignore_index when has_ignore, else 0.
int64_t CheckIndices(const int64_t* index, int64_t n, const IndexCheck& check, int64_t* out);

struct ArrayRef {
  int ndim = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
};

// out[p] = x[p with p[dim] := index[p]] for every position p of `index` (out and index are
// contiguous with index's shape).
template <typename T>
void Gather(const T* x, ArrayRef xa, int dim, const int64_t* index, ArrayRef ia, T* out);

// out[p with p[dim] := index[p]] += src[p] for every position p of `index`; out is contiguous
// with out_sizes, src has index's shape (contiguous). Serial over the dim to keep sums in a
// fixed order (deterministic).
template <typename T>
void ScatterAdd(T* out, ArrayRef oa, int dim, const int64_t* index, ArrayRef ia, const T* src);

// out[i, :] = x[index[i], :] for contiguous rows of length `row`.
template <typename T>
void IndexRows(const T* x, int64_t row, const int64_t* index, int64_t n, T* out);

// out[index[i], :] += src[i, :], in index order (deterministic).
template <typename T>
void IndexAddRows(T* out, int64_t row, const int64_t* index, int64_t n, const T* src);

}  // namespace trainyard::kernels::cpu
