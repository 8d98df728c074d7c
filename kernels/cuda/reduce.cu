// CudaBackendImpl's reductions: sums and max/min over [outer, k, inner] (kernels/cpu/reduce.h),
// NormPow (optim.h SumAbsPow / MaxAbs), and the row kernels softmax, cross-entropy and layer
// norm (softmax.h, norm.h). Math is in f32 for f32/bf16/f16 storage (f64 for f64 sums and
// max/min, double for NormPow's sums).
//
// Note [Deterministic reductions]
// Launch shapes depend only on the problem's sizes (never on the GPU), every block combines
// in a fixed tree (warp shuffles, then warps in order), and when one output is split over
// several blocks each block writes a partial to scratch (cudaMallocAsync on the stream) that a
// second kernel combines in split order. Results are the same run to run and GPU to GPU; they
// differ from the CPU's only by the order of additions. Max/min pick NaN first, then the
// extreme, ties to the lowest index, which makes their result independent of any order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"

namespace trainyard::kernels::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int64_t kTargetBlocks = 1024;  // what a split reduction aims for

// ---- Block reductions ----
// Warp shuffles of any value made of 32-bit words.
template <typename A>
__device__ __forceinline__ A Shfl(A v, int arg, bool down) {
  static_assert(sizeof(A) % 4 == 0, "shuffled values are made of 32-bit words");
  int w[sizeof(A) / 4];
  memcpy(w, &v, sizeof(A));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(A) / 4); ++i)
    w[i] = down ? __shfl_down_sync(kFull, w[i], arg) : __shfl_sync(kFull, w[i], arg);
  memcpy(&v, w, sizeof(A));
  return v;
}

// Combines v over the threadIdx.x lanes of this thread's row, in a fixed order; every lane
// gets the result. blockDim.x is 32 (rows are warps: no block barrier) or a multiple of 32 up
// to 1024 with blockDim.y == 1 (every thread of the block must call it). smem: 32 entries.
template <typename A, typename Op>
__device__ A RowAllReduce(A v, const Op& op, A* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, Shfl(v, o, true));
  if (blockDim.x == 32) return Shfl(v, 0, false);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call may still be reading smem
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = smem[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = op(v, smem[w]);
  return v;
}

struct SumF {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Rows of n elements: a warp per row (8 rows per block) up to 1024, else a block per row.
struct RowPlan {
  dim3 grid, block;
};
RowPlan PlanRows(int64_t rows, int64_t n) {
  const unsigned lanes = n <= 1024 ? 32 : (n <= 8192 ? 256 : 512);
  const unsigned per_block = lanes == 32 ? 8 : 1;
  TY_CHECK(CeilDiv(rows, per_block) < (int64_t{1} << 31)) << rows << " rows";
  return {dim3(static_cast<unsigned>(CeilDiv(rows, per_block))), dim3(lanes, per_block)};
}
__device__ __forceinline__ int64_t RowOf() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
}

// ---- [outer, k, inner] reductions (Note [Deterministic reductions]) ----
// A policy P says what is reduced: Identity(), Make(element pointer, j), a combine
// operator() and Write(output index, result).
template <typename T>
struct SumPolicy {
  using A = Acc<T>;
  T* out;
  A scale;
  __device__ A Identity() const { return A(0); }
  __device__ A Make(const T* p, int64_t) const { return LoadAcc(p); }
  __device__ A operator()(A a, A b) const { return a + b; }
  __device__ void Write(int64_t t, A v) const { out[t] = FromAcc<T>(v * scale); }
};

template <typename A>
struct ValIdx {
  A v;
  int64_t i;  // < 0: no element yet
};

template <typename T>
struct MaxMinPolicy {
  using A = ValIdx<Acc<T>>;
  T* out;
  int64_t* idx;
  bool is_max;
  __device__ A Identity() const { return {Acc<T>(0), -1}; }
  __device__ A Make(const T* p, int64_t j) const { return {LoadAcc(p), j}; }
  __device__ A operator()(A a, A b) const {
    if (a.i < 0 || b.i < 0) return a.i < 0 ? b : a;
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an != bn) return an ? a : b;
    if (an || a.v == b.v) return a.i < b.i ? a : b;
    return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  }
  __device__ void Write(int64_t t, A v) const {
    out[t] = FromAcc<T>(v.v);
    if (idx != nullptr) idx[t] = v.i;
  }
};

// sum |x|^p (p > 0) in double, or max |x| (NaN if any is NaN, 0 for none) when p == 0.
template <typename T>
struct NormPolicy {
  using A = double;
  double* out;
  double p;
  __device__ A Identity() const { return 0; }
  __device__ A Make(const T* ptr, int64_t) const {
    const double v = fabs(static_cast<double>(Load(ptr)));
    return p == 2 ? v * v : (p == 1 || p == 0 ? v : pow(v, p));
  }
  __device__ A operator()(A a, A b) const {
    if (p != 0) return a + b;
    return a != a ? a : (b != b ? b : fmax(a, b));
  }
  __device__ void Write(int64_t t, A v) const { out[t] = v; }
};

// x: (outer, k), a row per warp or block (PlanRows); split blockIdx.y takes the k indices
// [blockIdx.y * chunk, + chunk). partial (when not null): (outer, gridDim.y).
template <typename T, typename P>
__global__ void __launch_bounds__(512) ReduceRowsKernel(P p, const T* x, int64_t outer, int64_t k,
                                                        int64_t chunk, typename P::A* partial) {
  __shared__ typename P::A smem[32];
  const int64_t row = RowOf();
  const int64_t j0 = blockIdx.y * chunk, j1 = Min64(k, j0 + chunk);
  typename P::A acc = p.Identity();
  if (row < outer) {
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x)
      acc = p(acc, p.Make(x + row * k + j, j));
  }
  acc = RowAllReduce(acc, p, smem);
  if (row >= outer || threadIdx.x != 0) return;
  if (partial == nullptr) {
    p.Write(row, acc);
  } else {
    partial[row * gridDim.y + blockIdx.y] = acc;
  }
}

// x: (outer, k, inner); block (32, 8), grid.x = outer * ceil(inner / 32) column tiles, split
// blockIdx.y over k as above. Thread (tx, ty) sums column i over j = j0 + ty, + 8, ...
// partial (when not null): (outer * inner, gridDim.y).
template <typename T, typename P>
__global__ void __launch_bounds__(256) ReduceColsKernel(P p, const T* x, int64_t k, int64_t inner,
                                                        int64_t chunk, typename P::A* partial) {
  __shared__ typename P::A smem[8][32];
  const int64_t tiles = (inner + 31) / 32;
  const int64_t o = blockIdx.x / tiles, i = (blockIdx.x % tiles) * 32 + threadIdx.x;
  const int64_t j0 = blockIdx.y * chunk, j1 = Min64(k, j0 + chunk);
  typename P::A acc = p.Identity();
  if (i < inner) {
    for (int64_t j = j0 + threadIdx.y; j < j1; j += 8) {
      acc = p(acc, p.Make(x + (o * k + j) * inner + i, j));
    }
  }
  smem[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= inner) return;
  for (int r = 1; r < 8; ++r) acc = p(acc, smem[r][threadIdx.x]);
  const int64_t t = o * inner + i;
  if (partial == nullptr) {
    p.Write(t, acc);
  } else {
    partial[t * gridDim.y + blockIdx.y] = acc;
  }
}

// out[t] = the splits of output t combined in order.
template <typename P>
__global__ void FinishKernel(P p, const typename P::A* partial, int64_t count, int splits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < count;
       t += stride) {
    typename P::A acc = partial[t * splits];
    for (int s = 1; s < splits; ++s) acc = p(acc, partial[t * splits + s]);
    p.Write(t, acc);
  }
}

template <typename T, typename P>
void LaunchReduce(const char* name, const P& p, const T* x, int64_t outer, int64_t k, int64_t inner,
                  cudaStream_t stream) {
  using A = typename P::A;
  const int64_t count = outer * inner;
  if (count == 0) return;
  dim3 grid, block;
  int64_t blocks = 0, min_chunk = 0;
  if (inner == 1) {
    const RowPlan plan = PlanRows(outer, k);
    grid = plan.grid, block = plan.block, blocks = grid.x;
    min_chunk = block.x == 32 ? k : 8192;  // warp rows are short: never split
  } else {
    blocks = outer * CeilDiv(inner, 32);
    TY_CHECK(blocks < (int64_t{1} << 31)) << name << ": " << outer << " x " << inner;
    grid = dim3(static_cast<unsigned>(blocks)), block = dim3(32, 8), min_chunk = 128;
  }
  int64_t splits = std::max<int64_t>(
      1, std::min(kTargetBlocks / blocks, CeilDiv(k, std::max<int64_t>(min_chunk, 1))));
  const int64_t chunk = k == 0 ? 0 : CeilDiv(k, splits);
  splits = k == 0 ? 1 : CeilDiv(k, chunk);
  grid.y = static_cast<unsigned>(splits);
  A* partial = nullptr;
  if (splits > 1) {
    partial = Scratch<A>(name, count * splits, stream);
  }
  if (inner == 1) {
    ReduceRowsKernel<<<grid, block, 0, stream>>>(p, x, outer, k, chunk, partial);
  } else {
    ReduceColsKernel<<<grid, block, 0, stream>>>(p, x, k, inner, chunk, partial);
  }
  CheckLaunch(name);
  if (partial == nullptr) return;
  FinishKernel<<<BlocksFor(count), 256, 0, stream>>>(p, partial, count, static_cast<int>(splits));
  CheckLaunch(name);
  TY_CUDA_CHECK(cudaFreeAsync(partial, stream));
}

// ---- Softmax and cross-entropy rows ----
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

// ---- Layer norm ----
// x, y: (rows, n) of T; weight, bias: n of P or null. mean, rstd: rows (f32).
template <typename T, typename P>
__global__ void __launch_bounds__(512)
    LayerNormForwardKernel(const T* x, const P* w, const P* b, T* y, float* mean, float* rstd,
                           int64_t rows, int64_t n, float eps) {
  __shared__ float smem[32];
  const int64_t row = RowOf();
  const bool live = row < rows;
  const T* xr = x + (live ? row : 0) * n;
  float s = 0;
  if (live) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += Load(xr + j);
  }
  const float mu = __fdiv_rn(RowAllReduce(s, SumF{}, smem), static_cast<float>(n));
  float ss = 0;  // a second pass about the mean, as on the CPU
  if (live) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float d = Load(xr + j) - mu;
      ss += d * d;
    }
  }
  ss = RowAllReduce(ss, SumF{}, smem);
  const float rs = __frcp_rn(__fsqrt_rn(__fdiv_rn(ss, static_cast<float>(n)) + eps));
  if (!live) return;
  T* yr = y + row * n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float v = (Load(xr + j) - mu) * rs;
    if (w != nullptr) v *= Load(w + j);
    if (b != nullptr) v += Load(b + j);
    yr[j] = FromFloat<T>(v);
  }
  if (threadIdx.x == 0) mean[row] = mu, rstd[row] = rs;
}

struct Sum2 {
  float a, b;
};
struct Sum2Op {
  __device__ Sum2 operator()(Sum2 u, Sum2 v) const { return {u.a + v.a, u.b + v.b}; }
};

// gx = rstd (gy w - mean(gy w) - xhat mean(gy w xhat)) per row.
template <typename T, typename P>
__global__ void __launch_bounds__(512)
    LayerNormGradXKernel(const T* x, const T* gy, const float* mean, const float* rstd, const P* w,
                         T* gx, int64_t rows, int64_t n) {
  __shared__ Sum2 smem[32];
  const int64_t row = RowOf();
  const bool live = row < rows;
  const int64_t o = (live ? row : 0) * n;
  const float mu = live ? mean[row] : 0.0f, rs = live ? rstd[row] : 0.0f;
  Sum2 acc{0.0f, 0.0f};
  if (live) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float g = Load(gy + o + j) * (w != nullptr ? Load(w + j) : 1.0f);
      acc.a += g;
      acc.b += g * (Load(x + o + j) - mu);
    }
  }
  acc = RowAllReduce(acc, Sum2Op{}, smem);
  if (!live) return;
  const float inv_n = __frcp_rn(static_cast<float>(n));
  const float c1 = acc.a * inv_n, c2 = acc.b * rs * inv_n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = Load(gy + o + j) * (w != nullptr ? Load(w + j) : 1.0f);
    gx[o + j] = FromFloat<T>(rs * (g - c1 - (Load(x + o + j) - mu) * rs * c2));
  }
}

// gw[j] = sum_r gy (x - mean_r) rstd_r and gb[j] = sum_r gy over the rows [blockIdx.y * chunk,
// + chunk). block (32, 8): tx a column, ty every 8th row; grid (ceil(n / 32), splits). With
// part null the sums go to gw / gb (either may be null), else to part: (2, splits, n) f32.
template <typename T, typename P>
__global__ void __launch_bounds__(256)
    LayerNormParamKernel(const T* x, const T* gy, const float* mean, const float* rstd, P* gw,
                         P* gb, float* part, int64_t rows, int64_t n, int64_t chunk) {
  __shared__ float sw[8][32], sb[8][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk, r1 = Min64(rows, r0 + chunk);
  float aw = 0, ab = 0;
  if (j < n) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float g = Load(gy + r * n + j);
      aw += g * (Load(x + r * n + j) - mean[r]) * rstd[r];
      ab += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0 || j >= n) return;
  for (int i = 1; i < 8; ++i) aw += sw[i][threadIdx.x], ab += sb[i][threadIdx.x];
  if (part != nullptr) {
    part[blockIdx.y * n + j] = aw;
    part[(gridDim.y + blockIdx.y) * n + j] = ab;
    return;
  }
  if (gw != nullptr) gw[j] = FromFloat<P>(aw);
  if (gb != nullptr) gb[j] = FromFloat<P>(ab);
}

// gw / gb = the splits of part summed in order.
template <typename P>
__global__ void LayerNormParamFinish(const float* part, P* gw, P* gb, int64_t n, int splits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += stride) {
    float aw = 0, ab = 0;
    for (int s = 0; s < splits; ++s) aw += part[s * n + j], ab += part[(splits + s) * n + j];
    if (gw != nullptr) gw[j] = FromFloat<P>(aw);
    if (gb != nullptr) gb[j] = FromFloat<P>(ab);
  }
}

template <typename T, typename P>
void LayerNormParams(const T* x, const T* gy, const float* mean, const float* rstd, P* gw, P* gb,
                     int64_t rows, int64_t n, cudaStream_t stream) {
  const int64_t tiles = CeilDiv(n, 32);
  int64_t splits = std::max<int64_t>(
      1, std::min(kTargetBlocks / std::max<int64_t>(tiles, 1), CeilDiv(rows, 64)));
  const int64_t chunk = rows == 0 ? 0 : CeilDiv(rows, splits);
  splits = rows == 0 ? 1 : CeilDiv(rows, chunk);
  float* part = nullptr;
  if (splits > 1) {
    part = Scratch<float>("layer_norm backward", 2 * splits * n, stream);
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  LayerNormParamKernel<<<grid, dim3(32, 8), 0, stream>>>(x, gy, mean, rstd, gw, gb, part, rows, n,
                                                         chunk);
  CheckLaunch("layer_norm backward");
  if (part == nullptr) return;
  LayerNormParamFinish<<<BlocksFor(n), 256, 0, stream>>>(part, gw, gb, n, static_cast<int>(splits));
  CheckLaunch("layer_norm backward");
  TY_CUDA_CHECK(cudaFreeAsync(part, stream));
}

}  // namespace

void CudaBackendImpl::ReduceSum(ScalarType type, const void* x, void* out, int64_t outer, int64_t k,
                                int64_t inner, double scale, Stream stream) {
  DispatchDtype<DtypeSet::kFloatF64>(type, "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SumPolicy<T> p{static_cast<T*>(out), static_cast<Acc<T>>(scale)};
    LaunchReduce("sum", p, static_cast<const T*>(x), outer, k, inner, AsStream(stream));
  });
}

void CudaBackendImpl::ReduceMaxMin(bool is_max, ScalarType type, const void* x, void* out,
                                   int64_t* idx, int64_t outer, int64_t k, int64_t inner,
                                   Stream stream) {
  const char* name = is_max ? "max" : "min";
  TY_CHECK(k > 0 || outer * inner == 0) << name << ": reducing an empty dim (k = 0)";
  DispatchDtype<DtypeSet::kFloatF64>(type, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MaxMinPolicy<T> p{static_cast<T*>(out), idx, is_max};
    LaunchReduce(name, p, static_cast<const T*>(x), outer, k, inner, AsStream(stream));
  });
}

void CudaBackendImpl::NormPow(ScalarType type, const void* x, int64_t n, double p, double* out,
                              Stream stream) {
  TY_CHECK(p >= 0) << "norm: p is " << p << "; it must be positive (0 for the max norm)";
  DispatchDtype<DtypeSet::kFloat>(type, "norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LaunchReduce("norm", NormPolicy<T>{out, p}, static_cast<const T*>(x), 1, n, 1,
                 AsStream(stream));
  });
}

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

void CudaBackendImpl::LayerNormForward(ScalarType type, ScalarType param_type, const void* x,
                                       const void* weight, const void* bias, void* y, float* mean,
                                       float* rstd, int64_t rows, int64_t n, double eps,
                                       Stream stream) {
  if (rows <= 0) return;
  const RowPlan plan = PlanRows(rows, n);
  DispatchDtype<DtypeSet::kFloat>(type, "layer_norm", [&](auto tt) {
    DispatchDtype<DtypeSet::kFloat>(param_type, "layer_norm", [&](auto pt) {
      using T = typename decltype(tt)::type;
      using P = typename decltype(pt)::type;
      LayerNormForwardKernel<<<plan.grid, plan.block, 0, AsStream(stream)>>>(
          static_cast<const T*>(x), static_cast<const P*>(weight), static_cast<const P*>(bias),
          static_cast<T*>(y), mean, rstd, rows, n, static_cast<float>(eps));
    });
  });
  CheckLaunch("layer_norm");
}

void CudaBackendImpl::LayerNormBackward(ScalarType type, ScalarType param_type, const void* x,
                                        const void* gy, const float* mean, const float* rstd,
                                        const void* weight, void* gx, void* gweight, void* gbias,
                                        int64_t rows, int64_t n, Stream stream) {
  if (n <= 0) return;
  const cudaStream_t s = AsStream(stream);
  DispatchDtype<DtypeSet::kFloat>(type, "layer_norm backward", [&](auto tt) {
    DispatchDtype<DtypeSet::kFloat>(param_type, "layer_norm backward", [&](auto pt) {
      using T = typename decltype(tt)::type;
      using P = typename decltype(pt)::type;
      const auto* xt = static_cast<const T*>(x);
      const auto* gyt = static_cast<const T*>(gy);
      if (gx != nullptr && rows > 0) {
        const RowPlan plan = PlanRows(rows, n);
        LayerNormGradXKernel<<<plan.grid, plan.block, 0, s>>>(
            xt, gyt, mean, rstd, static_cast<const P*>(weight), static_cast<T*>(gx), rows, n);
        CheckLaunch("layer_norm backward");
      }
      if (gweight != nullptr || gbias != nullptr) {
        LayerNormParams(xt, gyt, mean, rstd, static_cast<P*>(gweight), static_cast<P*>(gbias), rows,
                        n, s);
      }
    });
  });
}

}  // namespace trainyard::kernels::cuda
