#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

// Row reductions use 16 independent lanes so that they vectorise without reassociation flags.
template <typename T>
TY_SIMD T RowMax(const T* x, int64_t n) {
  const T lowest = -std::numeric_limits<T>::infinity();
  T acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = lowest;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  T m = lowest;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int j = 0; j < 16; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

template <typename T>
TY_SIMD T RowDot(const T* a, const T* b, int64_t n) {
  T acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  T s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  return s + ((acc[0] + acc[2]) + (acc[1] + acc[3]));
}

// y = exp(x - shift); y may alias x.
template <typename T>
TY_SIMD void ExpShifted(const T* x, T* y, T shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastExp(x[i] - shift);
}

// y = exp(x - shift), returning sum(y) (16 lanes); y does not alias x.
template <typename T>
TY_SIMD T ExpShiftedSum(const T* x, T* y, T shift, int64_t n) {
  T acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) {
      y[i + j] = FastExp(x[i + j] - shift);
      acc[j] += y[i + j];
    }
  }
  T s = 0;
  for (; i < n; ++i) s += (y[i] = FastExp(x[i] - shift));
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  return s + ((acc[0] + acc[2]) + (acc[1] + acc[3]));
}

// y = x * scale + shift; y may alias x.
template <typename T>
TY_SIMD void AffineRow(const T* x, T* y, T scale, T shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale + shift;
}

// gx = y * (gy - dot)
template <typename T>
TY_SIMD void SoftmaxGradRow(const T* y, const T* gy, T* gx, T dot, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gx[i] = y[i] * (gy[i] - dot);
}

// gx = gy - exp(y) * sum
template <typename T>
TY_SIMD void LogSoftmaxGradRow(const T* y, const T* gy, T* gx, T sum, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] - FastExp(y[i]) * sum;
}

// grad = g * exp(x - lse) - off
template <typename T>
TY_SIMD void ScaledSoftmaxRow(const T* x, T* grad, T lse, T g, T off, int64_t n) {
  for (int64_t i = 0; i < n; ++i) grad[i] = g * FastExp(x[i] - lse) - off;
}

template <typename T>
void PrefetchRow(const T* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(T)); i += 64) __builtin_prefetch(c + i);
}

// log(sum_j exp(x[j])) of one row; the exponentials go through a stack buffer so that x is
// only read.
template <typename T>
T LogSumExp(const T* x, int64_t n) {
  constexpr int64_t kChunk = 256;
  T buf[kChunk];
  const T m = RowMax(x, n);
  T s = 0;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    ExpShifted(x + i, buf, m, len);
    s += SumContiguous(buf, len);
  }
  return m + std::log(s);
}

}  // namespace

template <typename T>
void SoftmaxForward(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  ParallelFor(rows, GrainFor(4 * n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      // Rows are often a page long and hardware prefetchers stop at page boundaries: ask for
      // the next row while this one computes.
      if (r + 1 < e) PrefetchRow(xr + n, n);
      if (log) {
        AffineRow(xr, yr, T(1), -LogSumExp(xr, n), n);
      } else {
        const T sum = ExpShiftedSum(xr, yr, RowMax(xr, n), n);
        AffineRow(yr, yr, T(1) / sum, T(0), n);
      }
    }
  });
}

template <typename T>
void SoftmaxBackward(const T* y, const T* gy, T* gx, int64_t rows, int64_t n, bool log) {
  ParallelFor(rows, GrainFor(4 * n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r * n;
      if (log) {
        LogSoftmaxGradRow(y + o, gy + o, gx + o, SumContiguous(gy + o, n), n);
      } else {
        SoftmaxGradRow(y + o, gy + o, gx + o, RowDot(gy + o, y + o, n), n);
      }
    }
  });
}

template <typename T>
void CrossEntropyForward(const T* logits, const int64_t* target, T* loss, T* lse, int64_t rows,
                         int64_t c, int64_t ignore_index, T smoothing) {
  ParallelFor(rows, GrainFor(3 * c), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t t = target[r];
      if (t == ignore_index) {
        loss[r] = T(0);
        lse[r] = T(0);
        continue;
      }
      const T* x = logits + r * c;
      const T l = LogSumExp(x, c);
      T value = (T(1) - smoothing) * (l - x[t]);
      // Skipped at 0 so that a -inf logit does not turn the loss into 0 * inf.
      if (smoothing != T(0)) value += smoothing * (l - SumContiguous(x, c) / static_cast<T>(c));
      loss[r] = value;
      lse[r] = l;
    }
  });
}

template <typename T>
void CrossEntropyBackward(const T* logits, const int64_t* target, const T* lse, const T* gloss,
                          T* grad, int64_t rows, int64_t c, int64_t ignore_index, T smoothing) {
  ParallelFor(rows, GrainFor(2 * c), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      T* gr = grad + r * c;
      const int64_t t = target[r];
      if (t == ignore_index) {
        std::fill(gr, gr + c, T(0));
        continue;
      }
      const T g = gloss[r];
      ScaledSoftmaxRow(logits + r * c, gr, lse[r], g, g * smoothing / static_cast<T>(c), c);
      gr[t] -= g * (T(1) - smoothing);
    }
  });
}

#define TY_INSTANTIATE(T)                                                                          \
  template void SoftmaxForward<T>(const T*, T*, int64_t, int64_t, bool);                           \
  template void SoftmaxBackward<T>(const T*, const T*, T*, int64_t, int64_t, bool);                \
  template void CrossEntropyForward<T>(const T*, const int64_t*, T*, T*, int64_t, int64_t,         \
                                       int64_t, T);                                                \
  template void CrossEntropyBackward<T>(const T*, const int64_t*, const T*, const T*, T*, int64_t, \
                                        int64_t, int64_t, T);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
#undef TY_INSTANTIATE

}  // namespace trainyard::kernels::cpu
