// Gather / scatter-add along one dim, and row gathers. Arrays are described by shape and
// strides in elements (up to kMaxDims dims); index arrays hold int64 positions that the caller
// has checked to lie in [0, size of dim).
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

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
