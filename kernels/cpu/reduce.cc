#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

// Sum of a contiguous run: blocks of 2048 are summed with 16 independent float lanes
// (vectorisable), and block sums are added in double, so a million-element row keeps about
// float precision instead of drifting like one running sum.
template <typename T>
TY_SIMD T SumBlock(const T* x, int64_t n) {
  T acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j];
  T s = 0;
  for (; i < n; ++i) s += x[i];
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  return s + ((acc[0] + acc[2]) + (acc[1] + acc[3]));
}

}  // namespace

template <typename T>
T SumContiguous(const T* x, int64_t n) {
  constexpr int64_t kBlock = 2048;
  if (n <= kBlock) return SumBlock(x, n);
  double total = 0;
  for (int64_t i = 0; i < n; i += kBlock) total += SumBlock(x + i, std::min(kBlock, n - i));
  return static_cast<T>(total);
}

namespace {

// acc[i] += x[i] for i < n (one row of a column reduction).
template <typename T>
TY_SIMD void AddRow(T* acc, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace

template <typename T>
void ReduceSum(const T* x, T* out, int64_t outer, int64_t k, int64_t inner, T scale) {
  if (inner == 1) {
    ParallelFor(outer, GrainFor(k), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out[o] = SumContiguous(x + o * k, k) * scale;
    });
    return;
  }
  // Columns: split over (outer, inner blocks) so that one output row is written by one chunk.
  const int64_t block = std::min<int64_t>(inner, 1024);
  const int64_t blocks = (inner + block - 1) / block;
  ParallelFor(outer * blocks, GrainFor(k * block), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / blocks, i0 = (t % blocks) * block, len = std::min(block, inner - i0);
      T* acc = out + o * inner + i0;
      std::fill(acc, acc + len, T(0));
      for (int64_t j = 0; j < k; ++j) AddRow(acc, x + (o * k + j) * inner + i0, len);
      if (scale != T(1))
        for (int64_t i = 0; i < len; ++i) acc[i] *= scale;
    }
  });
}

template <typename T>
void ReduceMaxMin(bool is_max, const T* x, T* out, int64_t* idx, int64_t outer, int64_t k,
                  int64_t inner) {
  ParallelFor(outer * inner, GrainFor(k), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / inner, i = t % inner;
      const T* p = x + o * k * inner + i;
      T best = p[0];
      int64_t best_j = 0;
      if (best == best) {
        for (int64_t j = 1; j < k; ++j) {
          T v = p[j * inner];
          if (v != v) {
            best = v, best_j = j;
            break;
          }
          if (is_max ? v > best : v < best) best = v, best_j = j;
        }
      }
      out[t] = best;
      if (idx != nullptr) idx[t] = best_j;
    }
  });
}

template <typename T>
void ReduceVar(const T* x, T* out, T* mean_out, int64_t outer, int64_t k, int64_t inner,
               int64_t correction) {
  const T denom = static_cast<T>(std::max<int64_t>(k - correction, 0));
  ParallelFor(outer * inner, GrainFor(2 * k), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / inner, i = t % inner;
      const T* p = x + o * k * inner + i;
      T mean = 0;
      if (inner == 1) {
        mean = SumContiguous(p, k) / static_cast<T>(k);
      } else {
        for (int64_t j = 0; j < k; ++j) mean += p[j * inner];
        mean /= static_cast<T>(k);
      }
      T ss = 0;
      for (int64_t j = 0; j < k; ++j) {
        T d = p[j * inner] - mean;
        ss += d * d;
      }
      out[t] = ss / denom;  // k <= correction gives inf or nan, as in PyTorch
      if (mean_out != nullptr) mean_out[t] = mean;
    }
  });
}

template float SumContiguous<float>(const float*, int64_t);
template double SumContiguous<double>(const double*, int64_t);
template void ReduceSum<float>(const float*, float*, int64_t, int64_t, int64_t, float);
template void ReduceSum<double>(const double*, double*, int64_t, int64_t, int64_t, double);
template void ReduceMaxMin<float>(bool, const float*, float*, int64_t*, int64_t, int64_t, int64_t);
template void ReduceMaxMin<double>(bool, const double*, double*, int64_t*, int64_t, int64_t,
                                   int64_t);
template void ReduceVar<float>(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t);
template void ReduceVar<double>(const double*, double*, double*, int64_t, int64_t, int64_t,
                                int64_t);

}  // namespace trainyard::kernels::cpu
