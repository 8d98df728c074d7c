// CudaBackendImpl's softmax and cross-entropy rows (kernels/cpu/softmax.h): a row per warp
// (8 rows per block) up to 1024 elements, else a block per row (row_reduce.cuh PlanRows);
// online max and sum in f32 (Note [Deterministic reductions] in reduce.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/row_reduce.cuh"

namespace trainyard::kernels::cuda {
namespace {

// Online softmax state: the running max m and sum s of exp(x - m). -inf adds nothing (a row
// of only -inf ends with s = 0, hence NaN, as on the CPU); +inf and NaN make s NaN (the CPU's
// exp(inf - inf)).
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ void Push(MaxSum& a, float v) {
  if (v == INFINITY) v = NAN;
  if (v > a.m) {
    a.s = a.s * Exp(a.m - v) + 1.0f;
    a.m = v;
  } else if (v != -INFINITY) {
    a.s += Exp(v - a.m);
  }
}
__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};
  return {m, a.s * Exp(a.m - m) + b.s * Exp(b.m - m)};
}
struct MergeOp {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const { return Merge(a, b); }
};

// x, y: (rows, n), y may alias x: y = exp(x - m) / s, or x - (m + log s) when log.
template <typename T>
__global__ void __launch_bounds__(512)
    SoftmaxForwardKernel(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  __shared__ MaxSum smem[32];
  const int64_t row = RowOf();
  const bool live = row < rows;
  const T* xr = x + (live ? row : 0) * n;
  T* yr = y + (live ? row : 0) * n;
  MaxSum acc{-INFINITY, 0.0f};
  if (live) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) Push(acc, Load(xr + j));
  }
  acc = RowAllReduce(acc, MergeOp{}, smem);
  if (!live) return;
  if (log) {
    const float lse = acc.m + Log(acc.s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = FromFloat<T>(Load(xr + j) - lse);
  } else {
    const float inv = __frcp_rn(acc.s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      yr[j] = FromFloat<T>(Exp(Load(xr + j) - acc.m) * inv);
    }
  }
}

// gx = y * (gy - sum(gy * y)), or gy - exp(y) * sum(gy) when log. gx may alias gy.
template <typename T>
__global__ void __launch_bounds__(512)
    SoftmaxBackwardKernel(const T* y, const T* gy, T* gx, int64_t rows, int64_t n, bool log) {
  __shared__ float smem[32];
  const int64_t row = RowOf();
  const bool live = row < rows;
  const int64_t o = (live ? row : 0) * n;
  float acc = 0;
  if (live) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      acc += log ? Load(gy + o + j) : Load(gy + o + j) * Load(y + o + j);
    }
  }
  acc = RowAllReduce(acc, SumF{}, smem);
  if (!live) return;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = Load(gy + o + j), yv = Load(y + o + j);
    gx[o + j] = FromFloat<T>(log ? g - Exp(yv) * acc : yv * (g - acc));
  }
}

struct CeAcc {
  MaxSum ms;
  float sum;  // of the logits, for label smoothing
};
struct CeMerge {
  __device__ CeAcc operator()(CeAcc a, CeAcc b) const { return {Merge(a.ms, b.ms), a.sum + b.sum}; }
};

// logits: (rows, c), rows ld apart. loss = (1 - s)(lse - x_t) + s (lse - mean x); ignored rows
// get 0 and 0.
template <typename T>
__global__ void __launch_bounds__(512)
    CrossEntropyForwardKernel(const T* logits, int64_t ld, const int64_t* target, float* loss,
                              float* lse, int64_t rows, int64_t c, int64_t ignore_index,
                              float smoothing) {
  __shared__ CeAcc smem[32];
  const int64_t row = RowOf();
  const bool live = row < rows;
  const int64_t t = live ? target[row] : ignore_index;
  const bool active = live && t != ignore_index;
  const T* x = logits + (live ? row : 0) * ld;
  CeAcc acc{{-INFINITY, 0.0f}, 0.0f};
  if (active) {
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float v = Load(x + j);
      Push(acc.ms, v);
      acc.sum += v;
    }
  }
  acc = RowAllReduce(acc, CeMerge{}, smem);
  if (!live || threadIdx.x != 0) return;
  if (!active) {
    loss[row] = 0.0f;
    lse[row] = 0.0f;
    return;
  }
  const float l = acc.ms.m + Log(acc.ms.s);
  float value = (1.0f - smoothing) * (l - Load(x + t));
  // Skipped at 0 so that a -inf logit does not turn the loss into 0 * inf.
  if (smoothing != 0.0f) value += smoothing * (l - __fdiv_rn(acc.sum, static_cast<float>(c)));
  loss[row] = value;
  lse[row] = l;
}

// grad = g (exp(x - lse) - (1 - s) [j == t] - s / c); ignored rows get 0. Both (rows, c), rows
// ld apart.
template <typename T>
__global__ void __launch_bounds__(512)
    CrossEntropyBackwardKernel(const T* logits, int64_t ld, const int64_t* target, const float* lse,
                               const float* gloss, T* grad, int64_t rows, int64_t c,
                               int64_t ignore_index, float smoothing) {
  const int64_t row = RowOf();
  if (row >= rows) return;  // no block barrier below
  const int64_t t = target[row];
  const T* x = logits + row * ld;
  T* gr = grad + row * ld;
  if (t == ignore_index) {
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) gr[j] = FromFloat<T>(0.0f);
    return;
  }
  const float g = gloss[row], l = lse[row];
  const float off = __fdiv_rn(g * smoothing, static_cast<float>(c)), hit = g * (1.0f - smoothing);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float v = g * Exp(Load(x + j) - l) - off;
    if (j == t) v -= hit;
    gr[j] = FromFloat<T>(v);
  }
}

}  // namespace

void CudaBackendImpl::SoftmaxForward(ScalarType type, const void* x, void* y, int64_t rows,
                                     int64_t n, bool log, Stream stream) {
  if (rows <= 0 || n <= 0) return;
  const RowPlan plan = PlanRows(rows, n);
  DispatchDtype<DtypeSet::kFloat>(type, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    SoftmaxForwardKernel<<<plan.grid, plan.block, 0, AsStream(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(y), rows, n, log);
  });
  CheckLaunch("softmax");
}

void CudaBackendImpl::SoftmaxBackward(ScalarType type, const void* y, const void* gy, void* gx,
                                      int64_t rows, int64_t n, bool log, Stream stream) {
  if (rows <= 0 || n <= 0) return;
  const RowPlan plan = PlanRows(rows, n);
  DispatchDtype<DtypeSet::kFloat>(type, "softmax backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    SoftmaxBackwardKernel<<<plan.grid, plan.block, 0, AsStream(stream)>>>(
        static_cast<const T*>(y), static_cast<const T*>(gy), static_cast<T*>(gx), rows, n, log);
  });
  CheckLaunch("softmax backward");
}

void CudaBackendImpl::CrossEntropyForward(ScalarType type, const void* logits, int64_t ld,
                                          const int64_t* target, float* loss, float* lse,
                                          int64_t rows, int64_t c, int64_t ignore_index,
                                          double smoothing, Stream stream) {
  if (rows <= 0) return;
  const RowPlan plan = PlanRows(rows, c);
  DispatchDtype<DtypeSet::kFloat>(type, "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    CrossEntropyForwardKernel<<<plan.grid, plan.block, 0, AsStream(stream)>>>(
        static_cast<const T*>(logits), ld, target, loss, lse, rows, c, ignore_index,
        static_cast<float>(smoothing));
  });
  CheckLaunch("cross_entropy");
}

void CudaBackendImpl::CrossEntropyBackward(ScalarType type, const void* logits, int64_t ld,
                                           const int64_t* target, const float* lse,
                                           const float* gloss, void* grad, int64_t rows, int64_t c,
                                           int64_t ignore_index, double smoothing, Stream stream) {
  if (rows <= 0 || c <= 0) return;
  const RowPlan plan = PlanRows(rows, c);
  DispatchDtype<DtypeSet::kFloat>(type, "cross_entropy backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    CrossEntropyBackwardKernel<<<plan.grid, plan.block, 0, AsStream(stream)>>>(
        static_cast<const T*>(logits), ld, target, lse, gloss, static_cast<T*>(grad), rows, c,
        ignore_index, static_cast<float>(smoothing));
  });
  CheckLaunch("cross_entropy backward");
}

}  // namespace trainyard::kernels::cuda
