// Reductions over the middle axis of a contiguous array viewed as [outer, k, inner]:
// out[o, i] = reduce_j x[o, j, i]. Any reduction over one run of adjacent dims maps to this
// shape; the op layer permutes other cases into it. T is float or double.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// Sum of a contiguous run, vectorised with 16 lanes per block of 2048 and blocks added in
// double: the row sum every kernel shares.
template <typename T>
T SumContiguous(const T* x, int64_t n);

// out = scale * sum_j x.  (scale = 1/k gives the mean.)
template <typename T>
void ReduceSum(const T* x, T* out, int64_t outer, int64_t k, int64_t inner, T scale);

// out = max_j x (is_max) or min_j x; idx (if not null) gets the first index of the extreme.
// NaN propagates: a NaN in the run wins and its index is reported.
template <typename T>
void ReduceMaxMin(bool is_max, const T* x, T* out, int64_t* idx, int64_t outer, int64_t k,
                  int64_t inner);

// out = sum_j (x - mean)^2 / max(k - correction, 0); mean_out (if not null) gets the mean.
template <typename T>
void ReduceVar(const T* x, T* out, T* mean_out, int64_t outer, int64_t k, int64_t inner,
               int64_t correction);

}  // namespace trainyard::kernels::cpu
