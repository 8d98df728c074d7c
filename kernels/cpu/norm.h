// Layer and batch normalisation over contiguous arrays. T is float or double.
//
// Layer norm normalises each row of x: (rows, n) by its own mean and biased variance. Batch
// norm normalises each channel of x: (outer, c, inner) by statistics over its outer * inner
// values. weight and bias may be null (scale 1, shift 0); gradient outputs may be null when
// not needed. Every output element is computed by one task in a fixed order, so results do
// not depend on the thread count.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// y = (x - mean) * rstd * weight + bias per row, with mean[r] and rstd[r] = 1 / sqrt(var + eps)
// stored for the backward.
template <typename T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd,
                      int64_t rows, int64_t n, T eps);

// With xhat = (x - mean) * rstd and gxhat = gy * weight:
//   gx = rstd * (gxhat - mean_row(gxhat) - xhat * mean_row(gxhat * xhat))
//   gweight = sum_rows(gy * xhat), gbias = sum_rows(gy)
template <typename T>
void LayerNormBackward(const T* x, const T* gy, const T* mean, const T* rstd, const T* weight,
                       T* gx, T* gweight, T* gbias, int64_t rows, int64_t n);

// Per channel: mean[c] and the biased variance var[c] over outer and inner.
template <typename T>
void BatchNormStats(const T* x, T* mean, T* var, int64_t outer, int64_t c, int64_t inner);

// Training: mean[c] and invstd[c] = 1 / sqrt(var[c] + eps) from the batch (biased variance var),
// y = (x - mean[c]) * invstd[c] * weight[c] + bias[c] and, when running_mean and running_var are
// not null, running = (1 - momentum) * running + momentum * stat in place, with the unbiased
// variance var * m / (m - 1) for running_var (m = outer * inner > 1 values per channel).
template <typename T>
void BatchNormTrainingForward(const T* x, const T* weight, const T* bias, T* y, T* running_mean,
                              T* running_var, double momentum, double eps, T* mean, T* invstd,
                              int64_t outer, int64_t c, int64_t inner);

// y = (x - mean[c]) * invstd[c] * weight[c] + bias[c].
template <typename T>
void BatchNormForward(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias,
                      T* y, int64_t outer, int64_t c, int64_t inner);

// With xhat = (x - mean[c]) * invstd[c] and m = outer * inner values per channel:
//   training (mean and invstd are the batch's own):
//     gx = weight * invstd * (gy - sum(gy) / m - xhat * sum(gy * xhat) / m)
//   otherwise (running statistics, constants): gx = gy * weight * invstd
//   gweight[c] = sum(gy * xhat), gbias[c] = sum(gy)
template <typename T>
void BatchNormBackward(const T* x, const T* gy, const T* mean, const T* invstd, const T* weight,
                       T* gx, T* gweight, T* gbias, int64_t outer, int64_t c, int64_t inner,
                       bool training);

}  // namespace trainyard::kernels::cpu
