// CudaBackendImpl's normalisations, as kernels/cpu/norm.h: layer norm (a row per warp or
// block, f32 statistics for every storage type) and batch norm's own kernels (f32 over
// (outer, c, inner); cuDNN takes the shapes it supports, dnn.cc Note [cuDNN batch norm]). Both
// compute the mean first and then a second pass about it, as the CPU does.
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

constexpr int kThreads = 256;

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

// Two f32 sums at once (layer norm's gradient rows, batch norm's channels).
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

// ---- Batch norm (f32) over x: (outer, c, inner) ----
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
