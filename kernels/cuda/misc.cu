// CudaBackendImpl's indexing, random fills, multi-tensor optimizer kernels, pooling and batch
// norm, with the semantics of kernels/cpu/indexing.h, random.h, optim.h, pool.h and norm.h.
//
// Note [Bit-exact ports]
// Random fills reimplement Philox4x32-10 (kernels/cpu/philox.h) with the CPU's counter layout,
// so f32 uniform and Bernoulli draws equal the CPU's bit for bit (f64 uniform too); normal
// draws go through CUDA's double log/sin/cos and agree to rounding. AdamMulti rounds each
// operation as AdamUpdate<float> does (IEEE intrinsics, FMAs exactly where the CPU has them,
// subnormals kept: no flush to zero), so it is bit-exact. Pooling backward gathers (each input
// pixel sums the outputs whose windows hold it, in the CPU's order of additions) instead of
// scattering with atomics: deterministic, and bit-exact with the CPU for f32. Only
// IndexAddRows uses atomics (the order of additions is not fixed, as backend.h says).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"

namespace trainyard::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTensorsPerLaunch = 32;   // multi-tensor kernels: tensors per by-value batch
constexpr int64_t kTensorChunk = 4096;  // multi-tensor kernels: elements per block

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Rows of `len` elements, a warp or more per row: block (lanes, rows per block).
dim3 RowBlock(int64_t len) {
  const unsigned lanes =
      len >= 256 ? 256u : static_cast<unsigned>(std::max<int64_t>(32, CeilDiv(len, 32) * 32));
  return dim3(lanes, kThreads / lanes);
}
unsigned RowGrid(int64_t rows, dim3 block) {
  return static_cast<unsigned>(
      std::min<int64_t>(std::max<int64_t>(CeilDiv(rows, block.y), 1), 65535 * 8));
}

// ---- Indexing ----
// out[i, :] = x[index[i], :] (B: the element's bits); blockDim.y index entries per block.
template <typename B>
__global__ void IndexRowsKernel(const B* x, int64_t row, const int64_t* index, int64_t n, B* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const B* src = x + index[i] * row;
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) out[i * row + j] = src[j];
  }
}

// kernels/cpu/indexing.h CheckIndices; a rejected value goes to *fault, host memory the kernel
// writes through unified addressing. Plain stores, the op last: a launch sees the op of an
// earlier launch's fault and keeps it; threads of one launch write the same check and any of
// their rejected values.
__global__ void CheckIndicesKernel(const int64_t* index, int64_t n, IndexCheck check, int64_t* out,
                                   IndexFault* fault) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const int64_t v = index[i];
    const bool valid = (v >= 0 && v < check.size) || (check.has_ignore && v == check.ignore_index);
    out[i] = valid ? v : check.has_ignore ? check.ignore_index : 0;
    if (valid) continue;
    volatile IndexFault* f = fault;
    if (f->check.op != nullptr) continue;
    f->value = v;
    f->check.dim = check.dim;
    f->check.size = check.size;
    f->check.has_ignore = check.has_ignore;
    f->check.ignore_index = check.ignore_index;
    __threadfence_system();
    f->check.op = check.op;
  }
}

__device__ __forceinline__ void AtomicAdd(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void AtomicAdd(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void AtomicAdd(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void AtomicAdd(int64_t* p, int64_t v) {  // two's complement wraps
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// out[index[i], :] += src[i, :] with atomics.
template <typename T>
__global__ void IndexAddRowsKernel(T* out, int64_t row, const int64_t* index, int64_t n,
                                   const T* src) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    T* dst = out + index[i] * row;
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) AtomicAdd(dst + j, src[i * row + j]);
  }
}

// ---- Random (Note [Bit-exact ports]) ----
struct Words {
  uint32_t v[4];
};

__device__ __forceinline__ Words Philox(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

__device__ __forceinline__ float UnitFloat(uint32_t w) {
  return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
}
__device__ __forceinline__ double UnitDouble(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// lo + (hi - lo) u, rounded as the CPU's FillUniform<T> (T's hi - lo, then double), kept < hi
// in T (in f32 for bf16/f16).
template <typename T>
struct UniformFn {
  double lo, hi;  // already rounded to T (to f32 for bf16/f16)
  __device__ void operator()(const Words& r, Quad<T>* q) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (std::is_same_v<T, double>) {
        const double u = UnitDouble(r.v[j], r.v[(j + 1) % 4]);
        const double v = __dadd_rn(lo, __dmul_rn(__dsub_rn(hi, lo), u));
        q->v[j] = v < hi ? v : lo;
      } else {
        // Drawn and kept < hi in f32, then rounded to T, as the CPU draws bf16/f16 (in f32,
        // then converted): the rounding may reach hi, on both.
        const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
        const double range = static_cast<double>(__fsub_rn(fhi, flo));
        const float v = __double2float_rn(__dadd_rn(lo, __dmul_rn(range, UnitFloat(r.v[j]))));
        q->v[j] = FromFloat<T>(v < fhi ? v : flo);
      }
    }
  }
};

// Box-Muller on the word pairs (0, 1) and (2, 3), as FillNormal in random.cc.
template <typename T>
struct NormalFn {
  double mean, std;  // already rounded to T (to f32 for bf16/f16)
  __device__ void operator()(const Words& r, Quad<T>* q) const {
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      const double u1 = 1.0 - UnitDouble(r.v[j], r.v[j + 1]);
      const double u2 = UnitDouble(r.v[j + 1], r.v[j]);
      const double rad = sqrt(__dmul_rn(-2.0, log(u1)));
      double sn, cs;
      sincos(__dmul_rn(6.283185307179586, u2), &sn, &cs);
      q->v[j] = Narrow(__dadd_rn(mean, __dmul_rn(__dmul_rn(std, rad), cs)));
      q->v[j + 1] = Narrow(__dadd_rn(mean, __dmul_rn(__dmul_rn(std, rad), sn)));
    }
  }
  __device__ static T Narrow(double v) {
    if constexpr (std::is_same_v<T, double>) {
      return v;
    } else {
      return FromFloat<T>(__double2float_rn(v));
    }
  }
};

struct BernoulliFn {
  double p_keep;
  __device__ void operator()(const Words& r, Quad<uint8_t>* q) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) q->v[j] = UnitFloat(r.v[j]) < p_keep;
  }
};

// Element i of a draw takes counter offset + i / 4 and word i % 4 (kernels/cpu/random.h):
// thread c of the grid-stride loop draws counter c for elements [4c, 4c + 4). `quad`: out is
// aligned for one 4-element store.
template <typename T, typename F>
__global__ void RandomKernel(int64_t n, T* out, uint64_t seed, uint64_t offset, bool quad, F f) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t c = GlobalThread(); c < groups; c += GridThreads()) {
    const Words r = Philox(seed, offset + static_cast<uint64_t>(c));
    Quad<T> q;
    f(r, &q);
    if (quad && 4 * c + 4 <= n) {
      reinterpret_cast<Quad<T>*>(out)[c] = q;
    } else {
      for (int j = 0; j < 4 && 4 * c + j < n; ++j) out[4 * c + j] = q.v[j];
    }
  }
}

template <typename T, typename F>
void LaunchRandom(const char* name, int64_t n, T* out, uint64_t seed, uint64_t offset, F f,
                  cudaStream_t stream) {
  if (n <= 0) return;
  const bool quad = reinterpret_cast<uintptr_t>(out) % alignof(Quad<T>) == 0;
  RandomKernel<<<BlocksFor(CeilDiv(n, 4)), kThreads, 0, stream>>>(n, out, seed, offset, quad, f);
  CheckLaunch(name);
}

// The value v rounded to the draw's precision (f32 for f32/bf16/f16), as the CPU rounds its
// lo/hi or mean/std to T.
template <typename T>
double Rounded(double v) {
  return std::is_same_v<T, double> ? v : static_cast<double>(static_cast<float>(v));
}

// ---- Multi-tensor kernels: a by-value batch of up to kTensorsPerLaunch tensors per launch;
// tensor k owns blocks [first_block[k], first_block[k + 1]), kTensorChunk elements each ----
struct BlockMap {
  int64_t first_block[kTensorsPerLaunch + 1];
  int count;
  // The tensor of this block and the block's first element in it.
  __device__ int Find(int64_t* begin) const {
    const int64_t b = blockIdx.x;
    int k = 0;
    while (k + 1 < count && first_block[k + 1] <= b) ++k;
    *begin = (b - first_block[k]) * kTensorChunk;
    return k;
  }
};

struct AdamBatch {
  AdamTensor t[kTensorsPerLaunch];
  BlockMap map;
};

// The hyperparameters of one step rounded to f32 where AdamUpdate<float> rounds them.
struct AdamScalars {
  float decay, l2, lerp_coef, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
  bool use_l2, lerp_small;
};

AdamScalars MakeAdamScalars(int64_t step, double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled) {
  AdamScalars s;
  const bool decay = weight_decay != 0;
  s.decay = decay && decoupled ? static_cast<float>(1 - lr * weight_decay) : 1.0f;
  s.use_l2 = decay && !decoupled;
  s.l2 = static_cast<float>(weight_decay);
  const float w = static_cast<float>(1 - beta1);
  s.lerp_small = std::fabs(w) < 0.5f;
  s.lerp_coef = s.lerp_small ? w : w - 1.0f;
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1 - beta2);
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(beta1, t);
  s.bias_correction2_sqrt = static_cast<float>(std::pow(1 - std::pow(beta2, t), 0.5));
  s.eps = static_cast<float>(eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return s;
}

// AdamUpdate<float> (kernels/cpu/optim.cc) per element, every rounding spelled out.
__global__ void __launch_bounds__(kThreads)
    AdamKernel(const __grid_constant__ AdamBatch batch, const AdamScalars s,
               const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  int64_t begin = 0;
  const int k = batch.map.Find(&begin);
  float* param = batch.t[k].param;
  const float* grad = batch.t[k].grad;
  float* m = batch.t[k].exp_avg;
  float* v = batch.t[k].exp_avg_sq;
  const int64_t end = Min64(batch.t[k].n, begin + kTensorChunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float p = param[i];
    const float g = s.use_l2 ? __fmaf_rn(s.l2, p, grad[i]) : grad[i];
    const float mi = m[i];
    const float mn = __fmaf_rn(s.lerp_coef, __fsub_rn(g, mi), s.lerp_small ? mi : g);
    const float vn = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(v[i], s.beta2));
    p = __fmul_rn(p, s.decay);
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vn), s.bias_correction2_sqrt), s.eps);
    param[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, mn), denom));
    m[i] = mn;
    v[i] = vn;
  }
}

struct ScaleBatch {
  float* t[kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  BlockMap map;
};

// x *= scale; *found_inf = 1 when an x (before scaling) is inf or NaN.
__global__ void __launch_bounds__(kThreads)
    UnscaleKernel(const __grid_constant__ ScaleBatch batch, float scale, float* found_inf) {
  int64_t begin = 0;
  const int k = batch.map.Find(&begin);
  float* x = batch.t[k];
  const int64_t end = Min64(batch.n[k], begin + kTensorChunk);
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = x[i];
    bad = bad || (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
    x[i] = __fmul_rn(v, scale);
  }
  if (bad && found_inf != nullptr) *found_inf = 1.0f;
}

// Adds a tensor of n elements to the batch being built; launches it when full (flush: now).
template <typename Batch, typename Launch>
void AddToBatch(Batch* b, int64_t n, bool flush, const Launch& launch) {
  BlockMap& m = b->map;
  if (n > 0) {
    if (m.count == 0) m.first_block[0] = 0;
    m.first_block[m.count + 1] = m.first_block[m.count] + CeilDiv(n, kTensorChunk);
    ++m.count;
  }
  if (m.count == 0 || (!flush && m.count < kTensorsPerLaunch)) return;
  TY_CHECK(m.first_block[m.count] < (int64_t{1} << 31)) << m.first_block[m.count] << " blocks";
  launch(static_cast<unsigned>(m.first_block[m.count]));
  m.count = 0;
}

// ---- Pooling (kernels/cpu/pool.h; Note [Bit-exact ports]) ----
// Outputs o in [*lo, *hi] whose window [o stride - pad, + extent) holds input i (none: lo > hi).
__device__ __forceinline__ void Covering(int64_t i, int64_t stride, int64_t pad, int64_t extent,
                                         int64_t out, int64_t* lo, int64_t* hi) {
  const int64_t num = i + pad - extent + 1;
  *lo = num <= 0 ? 0 : (num + stride - 1) / stride;
  *hi = Min64(out - 1, (i + pad) / stride);
}

__device__ __forceinline__ int64_t AvgFactor(int64_t o, int64_t stride, int64_t pad, int64_t kernel,
                                             int64_t in, bool include_pad) {
  const int64_t start = o * stride - pad, end = Min64(start + kernel, in + pad);
  return include_pad ? end - start : Min64(end, in) - (start > 0 ? start : 0);
}

// One thread per output (p, oh, ow): taps in window order; the first tap read wins, a later
// one when greater or NaN (MaxRun). Empty windows give -inf and argmax -1.
template <typename T>
__global__ void MaxPoolForwardKernel(const Pool2dShape s, const T* x, T* y, int64_t* argmax) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  for (int64_t o = GlobalThread(); o < total; o += GridThreads()) {
    const int64_t ow = o % s.out_w, oh = o / s.out_w % s.out_h, p = o / (s.out_w * s.out_h);
    const T* xp = x + p * s.height * s.width;
    float best = -INFINITY;
    int64_t arg = -1;
    for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
      const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
      if (ih < 0 || ih >= s.height) continue;
      for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
        const int64_t iw = ow * s.stride_w - s.pad_w + kj * s.dilation_w;
        if (iw < 0 || iw >= s.width) continue;
        const float v = Load(xp + ih * s.width + iw);
        if (arg < 0 || v > best || v != v) best = v, arg = ih * s.width + iw;
      }
    }
    y[o] = FromFloat<T>(best);
    argmax[o] = arg;
  }
}

// One thread per input pixel: the gy of every window whose argmax it is, in output order.
template <typename T>
__global__ void MaxPoolBackwardKernel(const Pool2dShape s, const T* gy, const int64_t* argmax,
                                      T* gx) {
  const int64_t total = s.planes * s.height * s.width, ohw = s.out_h * s.out_w;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t iw = e % s.width, ih = e / s.width % s.height, p = e / (s.width * s.height);
    int64_t h0, h1, w0, w1;
    Covering(ih, s.stride_h, s.pad_h, (s.kernel_h - 1) * s.dilation_h + 1, s.out_h, &h0, &h1);
    Covering(iw, s.stride_w, s.pad_w, (s.kernel_w - 1) * s.dilation_w + 1, s.out_w, &w0, &w1);
    float acc = 0;
    for (int64_t oh = h0; oh <= h1; ++oh) {
      for (int64_t ow = w0; ow <= w1; ++ow) {
        const int64_t o = p * ohw + oh * s.out_w + ow;
        if (argmax[o] == ih * s.width + iw) acc += Load(gy + o);
      }
    }
    gx[e] = FromFloat<T>(acc);
  }
}

template <typename T>
__global__ void AvgPoolForwardKernel(const Pool2dShape s, bool include_pad, const T* x, T* y) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  for (int64_t o = GlobalThread(); o < total; o += GridThreads()) {
    const int64_t ow = o % s.out_w, oh = o / s.out_w % s.out_h, p = o / (s.out_w * s.out_h);
    const T* xp = x + p * s.height * s.width;
    float sum = 0;
    for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
      const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
      if (ih < 0 || ih >= s.height) continue;
      for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
        const int64_t iw = ow * s.stride_w - s.pad_w + kj * s.dilation_w;
        if (iw >= 0 && iw < s.width) sum += Load(xp + ih * s.width + iw);
      }
    }
    const int64_t area = AvgFactor(oh, s.stride_h, s.pad_h, s.kernel_h, s.height, include_pad) *
                         AvgFactor(ow, s.stride_w, s.pad_w, s.kernel_w, s.width, include_pad);
    y[o] = FromFloat<T>(__fdiv_rn(sum, static_cast<float>(area)));
  }
}

// Per input pixel: gy / area of the windows holding it, oh ascending and ow descending (the
// CPU scatters tap by tap: kj ascending meets this pixel's windows in ow descending order).
template <typename T>
__global__ void AvgPoolBackwardKernel(const Pool2dShape s, bool include_pad, const T* gy, T* gx) {
  const int64_t total = s.planes * s.height * s.width, ohw = s.out_h * s.out_w;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t iw = e % s.width, ih = e / s.width % s.height, p = e / (s.width * s.height);
    int64_t h0, h1, w0, w1;
    Covering(ih, s.stride_h, s.pad_h, (s.kernel_h - 1) * s.dilation_h + 1, s.out_h, &h0, &h1);
    Covering(iw, s.stride_w, s.pad_w, (s.kernel_w - 1) * s.dilation_w + 1, s.out_w, &w0, &w1);
    float acc = 0;
    for (int64_t oh = h0; oh <= h1; ++oh) {
      if ((ih + s.pad_h - oh * s.stride_h) % s.dilation_h != 0) continue;
      const int64_t fh = AvgFactor(oh, s.stride_h, s.pad_h, s.kernel_h, s.height, include_pad);
      for (int64_t ow = w1; ow >= w0; --ow) {
        if ((iw + s.pad_w - ow * s.stride_w) % s.dilation_w != 0) continue;
        const int64_t fw = AvgFactor(ow, s.stride_w, s.pad_w, s.kernel_w, s.width, include_pad);
        acc += __fdiv_rn(Load(gy + p * ohw + oh * s.out_w + ow), static_cast<float>(fh * fw));
      }
    }
    gx[e] = FromFloat<T>(acc);
  }
}

// Adaptive bins: [floor(o in / out), ceil((o + 1) in / out)).
__device__ __forceinline__ int64_t BinStart(int64_t o, int64_t in, int64_t out) {
  return o * in / out;
}
__device__ __forceinline__ int64_t BinEnd(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

// Row sums first, then their sum, as the CPU (exact for bins narrower than 16).
template <typename T>
__global__ void AdaptiveForwardKernel(const Pool2dShape s, const T* x, T* y) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  for (int64_t o = GlobalThread(); o < total; o += GridThreads()) {
    const int64_t ow = o % s.out_w, oh = o / s.out_w % s.out_h, p = o / (s.out_w * s.out_h);
    const int64_t h0 = BinStart(oh, s.height, s.out_h), h1 = BinEnd(oh, s.height, s.out_h);
    const int64_t w0 = BinStart(ow, s.width, s.out_w), w1 = BinEnd(ow, s.width, s.out_w);
    float sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih) {
      float row = 0;
      for (int64_t iw = w0; iw < w1; ++iw) row += Load(x + (p * s.height + ih) * s.width + iw);
      sum += row;
    }
    y[o] = FromFloat<T>(__fdiv_rn(sum, static_cast<float>((h1 - h0) * (w1 - w0))));
  }
}

template <typename T>
__global__ void AdaptiveBackwardKernel(const Pool2dShape s, const T* gy, T* gx) {
  const int64_t total = s.planes * s.height * s.width;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t iw = e % s.width, ih = e / s.width % s.height, p = e / (s.width * s.height);
    const int64_t oh1 = Min64(s.out_h - 1, ((ih + 1) * s.out_h - 1) / s.height);
    const int64_t ow1 = Min64(s.out_w - 1, ((iw + 1) * s.out_w - 1) / s.width);
    float acc = 0;
    for (int64_t oh = ih * s.out_h / s.height; oh <= oh1; ++oh) {
      const int64_t h0 = BinStart(oh, s.height, s.out_h), h1 = BinEnd(oh, s.height, s.out_h);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = iw * s.out_w / s.width; ow <= ow1; ++ow) {
        const int64_t w0 = BinStart(ow, s.width, s.out_w), w1 = BinEnd(ow, s.width, s.out_w);
        if (iw < w0 || iw >= w1) continue;
        const float g = Load(gy + (p * s.out_h + oh) * s.out_w + ow);
        acc += __fdiv_rn(g, static_cast<float>((h1 - h0) * (w1 - w0)));
      }
    }
    gx[e] = FromFloat<T>(acc);
  }
}

// ---- Batch norm (f32) over x: (outer, c, inner) ----
struct Sum2 {
  float a, b;
};

// Per channel blockIdx.x and split blockIdx.y of the outer rows [o0, o0 + chunk): a sums
// `a` (when set); b sums (bv ? bv : x - mean) * (x - mean) (when mean is set). part: (c, splits).
__global__ void __launch_bounds__(kThreads)
    ChannelSumsKernel(const float* a, const float* bv, const float* x, const float* mean,
                      Sum2* part, int64_t outer, int64_t c, int64_t inner, int64_t chunk) {
  __shared__ Sum2 smem[kThreads / 32];
  const int64_t ch = blockIdx.x, o1 = Min64(outer, (blockIdx.y + 1) * chunk);
  const float mu = mean != nullptr ? mean[ch] : 0.0f;
  Sum2 acc{0.0f, 0.0f};
  // (o, i) walks elements o * inner + i of the split blockDim.x at a time, without division.
  const int64_t step_o = blockDim.x / inner, step_i = blockDim.x % inner;
  int64_t o = blockIdx.y * chunk + threadIdx.x / inner, i = threadIdx.x % inner;
  while (o < o1) {
    const int64_t off = (o * c + ch) * inner + i;
    if (a != nullptr) acc.a += a[off];
    if (mean != nullptr) {
      const float d = x[off] - mu;
      acc.b += (bv != nullptr ? bv[off] : d) * d;
    }
    o += step_o, i += step_i;
    if (i >= inner) i -= inner, ++o;
  }
  for (int d = 16; d > 0; d >>= 1) {
    acc.a += __shfl_down_sync(0xffffffffu, acc.a, d);
    acc.b += __shfl_down_sync(0xffffffffu, acc.b, d);
  }
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
    acc.a += smem[w].a, acc.b += smem[w].b;
  part[ch * gridDim.y + blockIdx.y] = acc;
}

// The splits of each channel summed in order: s1 -> out1, s2 -> out2 (either may be null),
// divided by m when `divide`.
__global__ void ChannelFinishKernel(const Sum2* part, int splits, int64_t c, float* out1,
                                    float* out2, float m, bool divide) {
  for (int64_t ch = GlobalThread(); ch < c; ch += GridThreads()) {
    Sum2 acc{0.0f, 0.0f};
    for (int s = 0; s < splits; ++s)
      acc.a += part[ch * splits + s].a, acc.b += part[ch * splits + s].b;
    if (out1 != nullptr) out1[ch] = divide ? __fdiv_rn(acc.a, m) : acc.a;
    if (out2 != nullptr) out2[ch] = divide ? __fdiv_rn(acc.b, m) : acc.b;
  }
}

// out = u * sa[ch] + (v ? v * sb[ch] : 0) + s0[ch] over rows of `len`: (outer * c) rows of
// inner (ch = row % c), or when inner == 1 (outer) rows of c (ch = j). block (lanes, rows).
__global__ void ChannelAffineKernel(const float* u, const float* v, float* out, const float* sa,
                                    const float* sb, const float* s0, int64_t rows, int64_t len,
                                    int64_t c, bool channel_is_j) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row_ch = channel_is_j ? 0 : r % c;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const int64_t ch = channel_is_j ? j : row_ch, e = r * len + j;
      out[e] = v != nullptr ? u[e] * sa[ch] + v[e] * sb[ch] + s0[ch] : u[e] * sa[ch] + s0[ch];
    }
  }
}

// invstd = 1 / sqrt(var + eps) and, when running_mean is set, the running statistics updated
// (kernels/cpu/norm.cc BatchNormTrainingForward).
__global__ void BnFinishStatsKernel(const float* mean, const float* var, float* invstd,
                                    float* running_mean, float* running_var, int64_t c, float m,
                                    float momentum, float eps) {
  for (int64_t ch = GlobalThread(); ch < c; ch += GridThreads()) {
    invstd[ch] = __fdiv_rn(1.0f, __fsqrt_rn(var[ch] + eps));
    if (running_mean == nullptr) continue;
    running_mean[ch] = running_mean[ch] * (1.0f - momentum) + mean[ch] * momentum;
    running_var[ch] =
        running_var[ch] * (1.0f - momentum) + var[ch] * __fdiv_rn(m, m - 1.0f) * momentum;
  }
}

// Forward coefficients: scale = invstd * weight, shift = bias - mean * scale.
__global__ void BnForwardCoefKernel(const float* mean, const float* invstd, const float* weight,
                                    const float* bias, float* scale, float* shift, int64_t c) {
  for (int64_t ch = GlobalThread(); ch < c; ch += GridThreads()) {
    scale[ch] = invstd[ch] * (weight != nullptr ? weight[ch] : 1.0f);
    shift[ch] = (bias != nullptr ? bias[ch] : 0.0f) - mean[ch] * scale[ch];
  }
}

// From sum_g = sum gy and sum_gd = sum gy (x - mean): gweight, gbias and the gx coefficients
// gx = kg gy + kx x + k0 (kernels/cpu/norm.cc BatchNormBackward).
__global__ void BnBackwardCoefKernel(const float* sum_g, const float* sum_gd, const float* mean,
                                     const float* invstd, const float* weight, float* gweight,
                                     float* gbias, float* kg, float* kx, float* k0, int64_t c,
                                     float m, bool training) {
  for (int64_t ch = GlobalThread(); ch < c; ch += GridThreads()) {
    const float wi = (weight != nullptr ? weight[ch] : 1.0f) * invstd[ch];
    kg[ch] = wi;
    kx[ch] = training ? __fdiv_rn(-wi * invstd[ch] * invstd[ch] * sum_gd[ch], m) : 0.0f;
    k0[ch] = training ? __fdiv_rn(-wi * sum_g[ch], m) - kx[ch] * mean[ch] : 0.0f;
    if (gweight != nullptr) gweight[ch] = sum_gd[ch] * invstd[ch];
    if (gbias != nullptr) gbias[ch] = sum_g[ch];
  }
}

// Channel sums into s1 / s2 (c each, either may be null) through scratch partials, divided
// by m = outer * inner when `divide` (the statistics).
void ChannelSums(const float* a, const float* bv, const float* x, const float* mean, float* s1,
                 float* s2, int64_t outer, int64_t c, int64_t inner, bool divide,
                 cudaStream_t stream) {
  int64_t splits = std::max<int64_t>(1, std::min(1024 / c, CeilDiv(outer * inner, 16384)));
  const int64_t chunk = std::max<int64_t>(1, CeilDiv(outer, splits));
  splits = std::max<int64_t>(1, CeilDiv(outer, chunk));
  Sum2* part = Scratch<Sum2>("batch_norm", c * splits, stream);
  ChannelSumsKernel<<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(splits)), kThreads, 0,
                      stream>>>(a, bv, x, mean, part, outer, c, inner, chunk);
  CheckLaunch("batch_norm");
  ChannelFinishKernel<<<BlocksFor(c), kThreads, 0, stream>>>(
      part, static_cast<int>(splits), c, s1, s2, static_cast<float>(outer * inner), divide);
  CheckLaunch("batch_norm");
  TY_CUDA_CHECK(cudaFreeAsync(part, stream));
}

void ChannelAffine(const float* u, const float* v, float* out, const float* sa, const float* sb,
                   const float* s0, int64_t outer, int64_t c, int64_t inner, cudaStream_t stream) {
  const int64_t rows = inner == 1 ? outer : outer * c, len = inner == 1 ? c : inner;
  const dim3 block = RowBlock(len);
  ChannelAffineKernel<<<RowGrid(rows, block), block, 0, stream>>>(u, v, out, sa, sb, s0, rows, len,
                                                                  c, inner == 1);
  CheckLaunch("batch_norm");
}

}  // namespace

void CudaBackendImpl::IndexRows(ScalarType type, const void* x, int64_t row, const int64_t* index,
                                int64_t n, void* out, Stream stream) {
  if (n <= 0 || row <= 0) return;
  const dim3 block = RowBlock(row);
  auto launch = [&](auto tag) {
    using B = typename decltype(tag)::type;
    IndexRowsKernel<<<RowGrid(n, block), block, 0, AsStream(stream)>>>(
        static_cast<const B*>(x), row, index, n, static_cast<B*>(out));
  };
  switch (type) {
    case ScalarType::kF64:
    case ScalarType::kI64:
      launch(Tag<uint64_t>{});
      break;
    case ScalarType::kF32:
    case ScalarType::kI32:
      launch(Tag<uint32_t>{});
      break;
    case ScalarType::kBF16:
    case ScalarType::kF16:
      launch(Tag<uint16_t>{});
      break;
    case ScalarType::kU8:
    case ScalarType::kBool:
      launch(Tag<uint8_t>{});
      break;
  }
  CheckLaunch("index_select");
}

void CudaBackendImpl::CheckIndices(const int64_t* index, int64_t n, const IndexCheck& check,
                                   int64_t* out, IndexFault* fault, Stream stream) {
  if (n <= 0) return;
  CheckIndicesKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(index, n, check, out, fault);
  CheckLaunch("index check");
}

void CudaBackendImpl::IndexAddRows(ScalarType type, void* out, int64_t row, const int64_t* index,
                                   int64_t n, const void* src, Stream stream) {
  TY_CHECK(type != ScalarType::kBF16 && type != ScalarType::kF16)
      << "index_add on 16-bit floats would round the sums at every add; sum in f32";
  if (n <= 0 || row <= 0) return;
  const dim3 block = RowBlock(row);
  DispatchDtype<DtypeSet::kFloatF64Int>(type, "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) >= 4) {
      IndexAddRowsKernel<<<RowGrid(n, block), block, 0, AsStream(stream)>>>(
          static_cast<T*>(out), row, index, n, static_cast<const T*>(src));
    }
  });
  CheckLaunch("index_add");
}

void CudaBackendImpl::FillUniform(ScalarType type, int64_t n, void* out, uint64_t seed,
                                  uint64_t offset, double lo, double hi, Stream stream) {
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    LaunchRandom("uniform", n, static_cast<T*>(out), seed, offset,
                 UniformFn<T>{Rounded<T>(lo), Rounded<T>(hi)}, AsStream(stream));
  };
  DispatchDtype<DtypeSet::kFloatF64>(type, "uniform", launch);
}

void CudaBackendImpl::FillNormal(ScalarType type, int64_t n, void* out, uint64_t seed,
                                 uint64_t offset, double mean, double std, Stream stream) {
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    LaunchRandom("normal", n, static_cast<T*>(out), seed, offset,
                 NormalFn<T>{Rounded<T>(mean), Rounded<T>(std)}, AsStream(stream));
  };
  DispatchDtype<DtypeSet::kFloatF64>(type, "normal", launch);
}

void CudaBackendImpl::FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset,
                                    double p_keep, Stream stream) {
  LaunchRandom("bernoulli", n, out, seed, offset, BernoulliFn{p_keep}, AsStream(stream));
}

void CudaBackendImpl::AdamMulti(const AdamTensor* tensors, int count, int64_t step, double lr,
                                double beta1, double beta2, double eps, double weight_decay,
                                bool decoupled, const float* found_inf, Stream stream) {
  TY_CHECK(step >= 1) << "AdamMulti: step " << step << " (the first update is step 1)";
  const AdamScalars s = MakeAdamScalars(step, lr, beta1, beta2, eps, weight_decay, decoupled);
  AdamBatch batch{};
  auto launch = [&](unsigned blocks) {
    AdamKernel<<<blocks, kThreads, 0, AsStream(stream)>>>(batch, s, found_inf);
    CheckLaunch("adam");
  };
  for (int k = 0; k < count; ++k) {
    if (tensors[k].n > 0) batch.t[batch.map.count] = tensors[k];
    AddToBatch(&batch, tensors[k].n, k + 1 == count, launch);
  }
}

void CudaBackendImpl::UnscaleCheck(float* const* tensors, const int64_t* sizes, int count,
                                   float scale, float* found_inf, Stream stream) {
  ScaleBatch batch{};
  auto launch = [&](unsigned blocks) {
    UnscaleKernel<<<blocks, kThreads, 0, AsStream(stream)>>>(batch, scale, found_inf);
    CheckLaunch("unscale");
  };
  for (int k = 0; k < count; ++k) {
    if (sizes[k] > 0) batch.t[batch.map.count] = tensors[k], batch.n[batch.map.count] = sizes[k];
    AddToBatch(&batch, sizes[k], k + 1 == count, launch);
  }
}

void CudaBackendImpl::MaxPool2dForward(ScalarType type, const Pool2dShape& s, const void* x,
                                       void* y, int64_t* argmax, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    MaxPoolForwardKernel<<<BlocksFor(s.planes * s.out_h * s.out_w), kThreads, 0,
                           AsStream(stream)>>>(s, static_cast<const T*>(x), static_cast<T*>(y),
                                               argmax);
  });
  CheckLaunch("max_pool2d");
}

void CudaBackendImpl::MaxPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy,
                                        const int64_t* argmax, void* gx, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    MaxPoolBackwardKernel<<<BlocksFor(s.planes * s.height * s.width), kThreads, 0,
                            AsStream(stream)>>>(s, static_cast<const T*>(gy), argmax,
                                                static_cast<T*>(gx));
  });
  CheckLaunch("max_pool2d backward");
}

void CudaBackendImpl::AvgPool2dForward(ScalarType type, const Pool2dShape& s,
                                       bool count_include_pad, const void* x, void* y,
                                       Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AvgPoolForwardKernel<<<BlocksFor(s.planes * s.out_h * s.out_w), kThreads, 0,
                           AsStream(stream)>>>(s, count_include_pad, static_cast<const T*>(x),
                                               static_cast<T*>(y));
  });
  CheckLaunch("avg_pool2d");
}

void CudaBackendImpl::AvgPool2dBackward(ScalarType type, const Pool2dShape& s,
                                        bool count_include_pad, const void* gy, void* gx,
                                        Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "avg_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AvgPoolBackwardKernel<<<BlocksFor(s.planes * s.height * s.width), kThreads, 0,
                            AsStream(stream)>>>(s, count_include_pad, static_cast<const T*>(gy),
                                                static_cast<T*>(gx));
  });
  CheckLaunch("avg_pool2d backward");
}

void CudaBackendImpl::AdaptiveAvgPool2dForward(ScalarType type, const Pool2dShape& s, const void* x,
                                               void* y, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "adaptive_avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AdaptiveForwardKernel<<<BlocksFor(s.planes * s.out_h * s.out_w), kThreads, 0,
                            AsStream(stream)>>>(s, static_cast<const T*>(x), static_cast<T*>(y));
  });
  CheckLaunch("adaptive_avg_pool2d");
}

void CudaBackendImpl::AdaptiveAvgPool2dBackward(ScalarType type, const Pool2dShape& s,
                                                const void* gy, void* gx, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "adaptive_avg_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AdaptiveBackwardKernel<<<BlocksFor(s.planes * s.height * s.width), kThreads, 0,
                             AsStream(stream)>>>(s, static_cast<const T*>(gy), static_cast<T*>(gx));
  });
  CheckLaunch("adaptive_avg_pool2d backward");
}

void CudaBackendImpl::OwnBatchNormTrainingForward(const float* x, const float* weight,
                                                  const float* bias, float* y, float* running_mean,
                                                  float* running_var, double momentum, double eps,
                                                  float* mean, float* invstd, int64_t outer,
                                                  int64_t c, int64_t inner, Stream stream) {
  if (c <= 0) return;
  // ChannelSums divides by outer * inner; the op layer refuses statistics over one value.
  TY_CHECK(outer > 0 && inner > 0)
      << "batch_norm: statistics over " << outer << " x " << inner << " values per channel";
  const cudaStream_t st = AsStream(stream);
  float* var = Scratch<float>("batch_norm", c, st);
  ChannelSums(x, nullptr, x, nullptr, mean, nullptr, outer, c, inner, true, st);
  // A second pass about the mean (more accurate than E[x^2] - E[x]^2), as on the CPU.
  ChannelSums(nullptr, nullptr, x, mean, nullptr, var, outer, c, inner, true, st);
  BnFinishStatsKernel<<<BlocksFor(c), kThreads, 0, st>>>(
      mean, var, invstd, running_mean, running_var, c, static_cast<float>(outer * inner),
      static_cast<float>(momentum), static_cast<float>(eps));
  CheckLaunch("batch_norm");
  TY_CUDA_CHECK(cudaFreeAsync(var, st));
  BatchNormForward(x, mean, invstd, weight, bias, y, outer, c, inner, stream);
}

void CudaBackendImpl::BatchNormForward(const float* x, const float* mean, const float* invstd,
                                       const float* weight, const float* bias, float* y,
                                       int64_t outer, int64_t c, int64_t inner, Stream stream) {
  if (c <= 0 || outer * inner <= 0) return;
  const cudaStream_t st = AsStream(stream);
  float* coef = Scratch<float>("batch_norm", 2 * c, st);
  BnForwardCoefKernel<<<BlocksFor(c), kThreads, 0, st>>>(mean, invstd, weight, bias, coef, coef + c,
                                                         c);
  CheckLaunch("batch_norm");
  ChannelAffine(x, nullptr, y, coef, nullptr, coef + c, outer, c, inner, st);
  TY_CUDA_CHECK(cudaFreeAsync(coef, st));
}

void CudaBackendImpl::OwnBatchNormBackward(const float* x, const float* gy, const float* mean,
                                           const float* invstd, const float* weight, float* gx,
                                           float* gweight, float* gbias, int64_t outer, int64_t c,
                                           int64_t inner, bool training, Stream stream) {
  if (c <= 0) return;
  TY_CHECK(outer > 0 && inner > 0)
      << "batch_norm backward: over " << outer << " x " << inner << " values per channel";
  const cudaStream_t st = AsStream(stream);
  float* scratch = Scratch<float>("batch_norm backward", 5 * c, st);  // sum_g, sum_gd, kg, kx, k0
  float *sum_g = scratch, *sum_gd = scratch + c, *kg = scratch + 2 * c;
  ChannelSums(gy, gy, x, mean, sum_g, sum_gd, outer, c, inner, false, st);
  BnBackwardCoefKernel<<<BlocksFor(c), kThreads, 0, st>>>(
      sum_g, sum_gd, mean, invstd, weight, gweight, gbias, kg, kg + c, kg + 2 * c, c,
      static_cast<float>(outer * inner), training);
  CheckLaunch("batch_norm backward");
  if (gx != nullptr && outer * inner > 0) {
    ChannelAffine(gy, x, gx, kg, kg + c, kg + 2 * c, outer, c, inner, st);
  }
  TY_CUDA_CHECK(cudaFreeAsync(scratch, st));
}

}  // namespace trainyard::kernels::cuda
