// Softmax and log-softmax along the rows of a contiguous (rows, n) array, and the fused
// log-softmax + negative log-likelihood of cross-entropy over (rows, c) logits. Rows are
// max-subtracted for stability. T is float or double.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// y = softmax(x) along each row, or log_softmax(x) when `log`. y may alias x.
template <typename T>
void SoftmaxForward(const T* x, T* y, int64_t rows, int64_t n, bool log);

// From the forward output y and its gradient gy, per row:
//   softmax:     gx = y * (gy - sum(gy * y))
//   log_softmax: gx = gy - exp(y) * sum(gy)
template <typename T>
void SoftmaxBackward(const T* y, const T* gy, T* gx, int64_t rows, int64_t n, bool log);

// Per row r with target t = target[r] (in [0, c) unless it is ignore_index; the caller checks):
//   loss[r] = (1 - smoothing) * (lse - x[t]) + smoothing * (lse - mean_j x[j])
// where lse[r] = log(sum_j exp(x[j])) is stored for the backward. That is PyTorch's
// (1 - eps) * nll + eps * (-sum_j log p_j / c). Ignored rows get loss 0.
template <typename T>
void CrossEntropyForward(const T* logits, const int64_t* target, T* loss, T* lse, int64_t rows,
                         int64_t c, int64_t ignore_index, T smoothing);

// grad[r, j] = gloss[r] * (softmax_j - (1 - smoothing) * [j == t] - smoothing / c); ignored
// rows get 0.
template <typename T>
void CrossEntropyBackward(const T* logits, const int64_t* target, const T* lse, const T* gloss,
                          T* grad, int64_t rows, int64_t c, int64_t ignore_index, T smoothing);

}  // namespace trainyard::kernels::cpu
