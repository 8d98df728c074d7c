// Fused attention (backend.h AttentionForward/AttentionBackward) in the style of
// flash-attention 2: tiles of keys and values pass through shared memory, the softmax is
// computed online, and nothing of size L x S touches global memory. Semantics are those of
// kernels/cpu/attention.h: P = softmax_j(scale * q_i . k_j) over j <= i when causal, else over
// all j; out_i = sum_j P_ij v_j. Storage is f32, bf16 or f16; all math is f32.
//
// Note [Attention tiles]
// Every kernel runs 256 threads as 16 row groups of 16 lanes: thread t owns rows
// t / 16 + 16 i of a tile and columns t % 16 + 16 j, so a row's partial results live in one
// half-warp and reduce with shuffles. Tiles are stored as f32 in shared memory with odd row
// strides (no bank conflicts in the inner products), the head dimension padded with zeros to
// kD in {32, 64, 128}. Scores are kept in log2 units (scale * log2(e) folded in) so the
// exponentials are exp2f; lse is written in natural-log units.
//
// Backward (three kernels, no atomics, deterministic):
//   RowDotKernel    D_i = sum_d gout_id out_id                      (scratch f32, batch * l)
//   KeyGradKernel   per key tile: gv = P^T gout, gk = scale dS^T q  (loops over query tiles)
//   QueryGradKernel per query tile: gq = scale dS k                 (loops over key tiles)
// with P = exp(scale q k^T - lse) recomputed and dS = P * (gout v^T - D).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"

namespace trainyard::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroups = kThreads / 16;  // row groups (Note [Attention tiles])
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Tile heights: query rows and keys per tile, per kernel. With kD = 128 each kernel needs
// about 110 KiB of shared memory, within sm_80's 163 KiB and sm_90's 227 KiB.
constexpr int kFwdRows = 64, kFwdKeys = 64;
constexpr int kKgKeys = 64, kKgRows = 32;
constexpr int kQgRows = 64, kQgKeys = 32;

struct Dims {
  int l, s, e;
  int heads;         // AttentionArgs::heads: how operands address batch items
  float scale;       // as given
  float scale_log2;  // scale * log2(e): scores in log2 units
};

__device__ __forceinline__ float HalfWarpMax(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float HalfWarpSum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// dst (rows, kD + 1) f32 = src rows [row0, row0 + rows) of an (n, e) array with rows ld
// apart, zero past n rows or e columns.
template <typename T, int kD>
__device__ void LoadTile(float* dst, const T* src, int64_t ld, int row0, int rows, int n, int e) {
  for (int idx = threadIdx.x; idx < rows * kD; idx += kThreads) {
    const int r = idx / kD, d = idx % kD, row = row0 + r;
    dst[r * (kD + 1) + d] = row < n && d < e ? Load(src + row * ld + d) : 0.0f;
  }
}

// acc[i][j] += sum_{x < kK} a[row_i * lda + x] * b[col_j * ldb + x]: rows of a against rows
// of b, row_i = t / 16 + kGroups i, col_j = t % 16 + 16 j.
template <int kI, int kJ, int kK>
__device__ __forceinline__ void MicroNT(const float* a, int lda, const float* b, int ldb,
                                        float (&acc)[kI][kJ]) {
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
#pragma unroll 4
  for (int x = 0; x < kK; ++x) {
    float av[kI], bv[kJ];
#pragma unroll
    for (int i = 0; i < kI; ++i) av[i] = a[(tr + kGroups * i) * lda + x];
#pragma unroll
    for (int j = 0; j < kJ; ++j) bv[j] = b[(tc + 16 * j) * ldb + x];
#pragma unroll
    for (int i = 0; i < kI; ++i) {
#pragma unroll
      for (int j = 0; j < kJ; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
}

// acc[i][j] += sum_{x < kK} a[row_i * lda + x] * b[x * ldb + col_j]: rows of a against
// columns of b.
template <int kI, int kJ, int kK>
__device__ __forceinline__ void MicroNN(const float* a, int lda, const float* b, int ldb,
                                        float (&acc)[kI][kJ]) {
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
#pragma unroll 4
  for (int x = 0; x < kK; ++x) {
    float av[kI], bv[kJ];
#pragma unroll
    for (int i = 0; i < kI; ++i) av[i] = a[(tr + kGroups * i) * lda + x];
#pragma unroll
    for (int j = 0; j < kJ; ++j) bv[j] = b[x * ldb + tc + 16 * j];
#pragma unroll
    for (int i = 0; i < kI; ++i) {
#pragma unroll
      for (int j = 0; j < kJ; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
}

// Whether query `row` sees key `col`.
template <bool kCausal>
__device__ __forceinline__ bool Visible(int row, int col, const Dims& dm) {
  return row < dm.l && col < dm.s && (!kCausal || col <= row);
}

// One key tile of the online softmax for the thread's rows: scores sc (raw dot products) are
// masked and put in log2 units; m, sum and o move to the new row maxima; P goes to ps
// (kFwdRows, kFwdKeys + 1).
template <int kR, int kC, int kJ, bool kCausal>
__device__ __forceinline__ void OnlineSoftmax(float (&sc)[kR][kC], float (&m)[kR], float (&sum)[kR],
                                              float (&o)[kR][kJ], float* ps, int q0, int k0,
                                              const Dims& dm) {
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int row = q0 + tr + kGroups * i;
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int col = k0 + tc + 16 * j;  // rows past l are computed and never stored
      const bool ok = col < dm.s && (!kCausal || col <= row);
      sc[i][j] = ok ? sc[i][j] * dm.scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, sc[i][j]);
    }
    const float m_new = fmaxf(m[i], HalfWarpMax(tile_max));
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: all zeros
    const float alpha = exp2f(m[i] - base);
    float row_sum = 0;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const float p = exp2f(sc[i][j] - base);
      ps[(tr + kGroups * i) * (kFwdKeys + 1) + tc + 16 * j] = p;
      row_sum += p;
    }
    sum[i] = sum[i] * alpha + HalfWarpSum(row_sum);
    m[i] = m_new;
#pragma unroll
    for (int j = 0; j < kJ; ++j) o[i][j] *= alpha;
  }
}

// Grid: batch * ceil(l / kFwdRows) blocks, one query tile each (the last tiles, the
// heaviest when causal, first). q, out: (batch, l, e); k, v: (batch, s, e); lse: (batch, l).
template <typename T, int kD, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(Operand<const T> q, Operand<const T> k, Operand<const T> v, Operand<T> out,
                  float* lse, Dims dm, int tiles) {
  constexpr int kLd = kD + 1, kR = kFwdRows / kGroups, kC = kFwdKeys / 16, kJ = kD / 16;
  extern __shared__ float smem[];
  float* qs = smem;                 // (kFwdRows, kLd)
  float* ks = qs + kFwdRows * kLd;  // (kFwdKeys, kLd)
  float* vs = ks + kFwdKeys * kLd;  // (kFwdKeys, kLd)
  float* ps = vs + kFwdKeys * kLd;  // (kFwdRows, kFwdKeys + 1)
  const int q0 = (tiles - 1 - static_cast<int>(blockIdx.x % tiles)) * kFwdRows;
  const int64_t b = blockIdx.x / tiles;
  const T *qb = q.Item(b, dm.heads), *kb = k.Item(b, dm.heads), *vb = v.Item(b, dm.heads);
  LoadTile<T, kD>(qs, qb, q.row, q0, kFwdRows, dm.l, dm.e);
  float o[kR][kJ] = {}, m[kR], sum[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    m[i] = -INFINITY;
    sum[i] = 0;
  }
  const int kv_end = kCausal ? min(dm.s, q0 + kFwdRows) : dm.s;
  for (int k0 = 0; k0 < kv_end; k0 += kFwdKeys) {
    __syncthreads();  // the previous tile's readers are done (and qs is loaded)
    LoadTile<T, kD>(ks, kb, k.row, k0, kFwdKeys, dm.s, dm.e);
    LoadTile<T, kD>(vs, vb, v.row, k0, kFwdKeys, dm.s, dm.e);
    __syncthreads();
    float sc[kR][kC] = {};
    MicroNT<kR, kC, kD>(qs, kLd, ks, kLd, sc);
    OnlineSoftmax<kR, kC, kJ, kCausal>(sc, m, sum, o, ps, q0, k0, dm);
    __syncthreads();
    MicroNN<kR, kJ, kFwdKeys>(ps, kFwdKeys + 1, vs, kLd, o);
  }
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  T* ob = out.Item(b, dm.heads);
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int row = q0 + tr + kGroups * i;
    if (row >= dm.l) continue;
    const float inv = sum[i] > 0 ? 1.0f / sum[i] : 0.0f;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int d = tc + 16 * j;
      if (d < dm.e) ob[row * out.row + d] = FromFloat<T>(o[i][j] * inv);
    }
    if (tc == 0) lse[b * dm.l + row] = sum[i] > 0 ? m[i] * kLn2 + logf(sum[i]) : INFINITY;
  }
}

// dvec[r] = sum_d gout[r, d] out[r, d] over the batch * l rows r = b * l + i (row i of item
// b); a warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RowDotKernel(Operand<const T> gout, Operand<const T> out, float* dvec, int64_t rows, Dims dm) {
  const int lane = threadIdx.x % 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32; r < rows;
       r += step) {
    const int64_t b = r / dm.l, i = r % dm.l;
    const T* g = gout.Item(b, dm.heads) + i * gout.row;
    const T* y = out.Item(b, dm.heads) + i * out.row;
    float acc = 0;
    for (int d = lane; d < dm.e; d += 32) acc += Load(g + d) * Load(y + d);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) dvec[r] = acc;
  }
}

// Query rows [q0, q0 + kRows) of a batch item into shared memory: q and gout tiles, lse in
// log2 units (+inf past l, so P is 0 there) and D (0 past l).
template <typename T, int kD, int kRows>
__device__ void LoadQueryTile(float* qs, float* dos, float* lse_s, float* d_s, const T* q,
                              int64_t q_ld, const T* gout, int64_t gout_ld, const float* lse,
                              const float* dvec, int q0, const Dims& dm) {
  LoadTile<T, kD>(qs, q, q_ld, q0, kRows, dm.l, dm.e);
  LoadTile<T, kD>(dos, gout, gout_ld, q0, kRows, dm.l, dm.e);
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    const bool ok = q0 + r < dm.l;
    lse_s[r] = ok ? lse[q0 + r] * kLog2e : INFINITY;
    d_s[r] = ok ? dvec[q0 + r] : 0.0f;
  }
}

// Writes rows [row0, row0 + kI * kGroups) of acc * factor to dst (n, e), rows ld apart.
template <typename T, int kI, int kJ>
__device__ void StoreRows(T* dst, int64_t ld, const float (&acc)[kI][kJ], float factor, int row0,
                          int n, int e) {
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < kI; ++i) {
    const int row = row0 + tr + kGroups * i;
    if (row >= n) continue;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int d = tc + 16 * j;
      if (d < e) dst[row * ld + d] = FromFloat<T>(acc[i][j] * factor);
    }
  }
}

// Grid: batch * ceil(s / kKgKeys) blocks, one key tile each; gk, gv: (batch, s, e).
template <typename T, int kD, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    KeyGradKernel(Operand<const T> q, Operand<const T> k, Operand<const T> v, Operand<const T> gout,
                  const float* lse, const float* dvec, Operand<T> gk, Operand<T> gv, Dims dm,
                  int tiles) {
  constexpr int kLd = kD + 1, kPLd = kKgRows + 1;
  constexpr int kR = kKgKeys / kGroups, kC = kKgRows / 16, kJ = kD / 16;
  extern __shared__ float smem[];
  float* ks = smem;                     // (kKgKeys, kLd)
  float* vs = ks + kKgKeys * kLd;       // (kKgKeys, kLd)
  float* qs = vs + kKgKeys * kLd;       // (kKgRows, kLd)
  float* dos = qs + kKgRows * kLd;      // (kKgRows, kLd)
  float* ps = dos + kKgRows * kLd;      // P^T (kKgKeys, kPLd)
  float* dss = ps + kKgKeys * kPLd;     // dS^T (kKgKeys, kPLd)
  float* lse_s = dss + kKgKeys * kPLd;  // (kKgRows)
  float* d_s = lse_s + kKgRows;         // (kKgRows)
  const int k0 = static_cast<int>(blockIdx.x % tiles) * kKgKeys;
  const int64_t b = blockIdx.x / tiles;
  const T *qb = q.Item(b, dm.heads), *gob = gout.Item(b, dm.heads);
  LoadTile<T, kD>(ks, k.Item(b, dm.heads), k.row, k0, kKgKeys, dm.s, dm.e);
  LoadTile<T, kD>(vs, v.Item(b, dm.heads), v.row, k0, kKgKeys, dm.s, dm.e);
  float gk_acc[kR][kJ] = {}, gv_acc[kR][kJ] = {};
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  // Causal: query rows below k0 see none of these keys.
  for (int q0 = kCausal ? k0 / kKgRows * kKgRows : 0; q0 < dm.l; q0 += kKgRows) {
    __syncthreads();
    LoadQueryTile<T, kD, kKgRows>(qs, dos, lse_s, d_s, qb, q.row, gob, gout.row, lse + b * dm.l,
                                  dvec + b * dm.l, q0, dm);
    __syncthreads();
    float st[kR][kC] = {}, dpt[kR][kC] = {};  // S^T and dP^T for (key, query)
    MicroNT<kR, kC, kD>(ks, kLd, qs, kLd, st);
    MicroNT<kR, kC, kD>(vs, kLd, dos, kLd, dpt);
#pragma unroll
    for (int i = 0; i < kR; ++i) {
#pragma unroll
      for (int j = 0; j < kC; ++j) {
        const int key = tr + kGroups * i, r = tc + 16 * j;
        const float p = Visible<kCausal>(q0 + r, k0 + key, dm)
                            ? exp2f(st[i][j] * dm.scale_log2 - lse_s[r])
                            : 0.0f;
        ps[key * kPLd + r] = p;
        dss[key * kPLd + r] = p * (dpt[i][j] - d_s[r]);
      }
    }
    __syncthreads();
    MicroNN<kR, kJ, kKgRows>(ps, kPLd, dos, kLd, gv_acc);
    MicroNN<kR, kJ, kKgRows>(dss, kPLd, qs, kLd, gk_acc);
  }
  StoreRows<T>(gk.Item(b, dm.heads), gk.row, gk_acc, dm.scale, k0, dm.s, dm.e);
  StoreRows<T>(gv.Item(b, dm.heads), gv.row, gv_acc, 1.0f, k0, dm.s, dm.e);
}

// Grid: batch * ceil(l / kQgRows) blocks, one query tile each; gq: (batch, l, e).
template <typename T, int kD, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    QueryGradKernel(Operand<const T> q, Operand<const T> k, Operand<const T> v,
                    Operand<const T> gout, const float* lse, const float* dvec, Operand<T> gq,
                    Dims dm, int tiles) {
  constexpr int kLd = kD + 1, kPLd = kQgKeys + 1;
  constexpr int kR = kQgRows / kGroups, kC = kQgKeys / 16, kJ = kD / 16;
  extern __shared__ float smem[];
  float* qs = smem;                     // (kQgRows, kLd)
  float* dos = qs + kQgRows * kLd;      // (kQgRows, kLd)
  float* ks = dos + kQgRows * kLd;      // (kQgKeys, kLd)
  float* vs = ks + kQgKeys * kLd;       // (kQgKeys, kLd)
  float* dss = vs + kQgKeys * kLd;      // dS (kQgRows, kPLd)
  float* lse_s = dss + kQgRows * kPLd;  // (kQgRows)
  float* d_s = lse_s + kQgRows;         // (kQgRows)
  const int q0 = (tiles - 1 - static_cast<int>(blockIdx.x % tiles)) * kQgRows;
  const int64_t b = blockIdx.x / tiles;
  const T *kb = k.Item(b, dm.heads), *vb = v.Item(b, dm.heads);
  LoadQueryTile<T, kD, kQgRows>(qs, dos, lse_s, d_s, q.Item(b, dm.heads), q.row,
                                gout.Item(b, dm.heads), gout.row, lse + b * dm.l, dvec + b * dm.l,
                                q0, dm);
  float acc[kR][kJ] = {};
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  const int kv_end = kCausal ? min(dm.s, q0 + kQgRows) : dm.s;
  for (int k0 = 0; k0 < kv_end; k0 += kQgKeys) {
    __syncthreads();  // the previous tile's readers are done (and the query tile is loaded)
    LoadTile<T, kD>(ks, kb, k.row, k0, kQgKeys, dm.s, dm.e);
    LoadTile<T, kD>(vs, vb, v.row, k0, kQgKeys, dm.s, dm.e);
    __syncthreads();
    float sc[kR][kC] = {}, dp[kR][kC] = {};
    MicroNT<kR, kC, kD>(qs, kLd, ks, kLd, sc);
    MicroNT<kR, kC, kD>(dos, kLd, vs, kLd, dp);
#pragma unroll
    for (int i = 0; i < kR; ++i) {
#pragma unroll
      for (int j = 0; j < kC; ++j) {
        const int r = tr + kGroups * i, key = tc + 16 * j;
        const float p = Visible<kCausal>(q0 + r, k0 + key, dm)
                            ? exp2f(sc[i][j] * dm.scale_log2 - lse_s[r])
                            : 0.0f;
        dss[r * kPLd + key] = p * (dp[i][j] - d_s[r]);
      }
    }
    __syncthreads();
    MicroNN<kR, kJ, kQgKeys>(dss, kPLd, ks, kLd, acc);
  }
  StoreRows<T>(gq.Item(b, dm.heads), gq.row, acc, dm.scale, q0, dm.l, dm.e);
}

// Shared memory (bytes) of each kernel for head size kD.
constexpr size_t ForwardSmem(int kd) {
  return sizeof(float) * ((kFwdRows + 2 * kFwdKeys) * (kd + 1) + kFwdRows * (kFwdKeys + 1));
}
constexpr size_t KeyGradSmem(int kd) {
  return sizeof(float) *
         ((2 * kKgKeys + 2 * kKgRows) * (kd + 1) + 2 * kKgKeys * (kKgRows + 1) + 2 * kKgRows);
}
constexpr size_t QueryGradSmem(int kd) {
  return sizeof(float) *
         ((2 * kQgRows + 2 * kQgKeys) * (kd + 1) + kQgRows * (kQgKeys + 1) + 2 * kQgRows);
}

// Calls f(integral_constant<int, kD>, bool_constant<causal>) with kD the padded head size.
template <typename F>
void DispatchShape(int64_t e, bool causal, const F& f) {
  const auto with_d = [&](auto d) {
    if (causal) {
      f(d, std::true_type{});
    } else {
      f(d, std::false_type{});
    }
  };
  if (e <= 32) {
    with_d(std::integral_constant<int, 32>{});
  } else if (e <= 64) {
    with_d(std::integral_constant<int, 64>{});
  } else {
    with_d(std::integral_constant<int, 128>{});
  }
}

// Blocks for `batch` items of ceil(n / rows) tiles each; `tiles` receives the latter.
unsigned TileBlocks(int64_t batch, int64_t n, int rows, int* tiles) {
  const int64_t t = CeilDiv(n, rows);
  TY_CHECK(batch * t <= INT_MAX) << "attention: " << batch << " x " << t
                                 << " tiles is more than one launch can hold";
  *tiles = static_cast<int>(t);
  return static_cast<unsigned>(batch * t);
}

template <typename Kernel>
void AllowSmem(Kernel kernel, size_t bytes) {
  TY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
}

Dims MakeDims(const AttentionArgs& a) {
  TY_CHECK(a.l >= 0 && a.l <= INT_MAX && a.s >= 1 && a.s <= INT_MAX && a.e >= 1 && a.e <= 128 &&
           a.heads >= 1 && a.heads <= INT_MAX)
      << "attention: l=" << a.l << " s=" << a.s << " e=" << a.e << " heads=" << a.heads
      << " unsupported (need s >= 1, 1 <= e <= 128 and heads >= 1)";
  return Dims{static_cast<int>(a.l),       static_cast<int>(a.s),
              static_cast<int>(a.e),       static_cast<int>(a.heads),
              static_cast<float>(a.scale), static_cast<float>(a.scale * 1.4426950408889634)};
}

}  // namespace

bool CudaBackendImpl::AttentionFits(int device, ScalarType type, int64_t e) {
  if (e < 1 || e > 128) return false;
  int limit = 0;
  TY_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int kd = e <= 32 ? 32 : e <= 64 ? 64 : 128;
  const size_t need = std::max(
      {ForwardSmem(kd), KeyGradSmem(kd), QueryGradSmem(kd), AttentionTensorCoresSmem(type, e)});
  return need <= static_cast<size_t>(limit);
}

void CudaBackendImpl::AttentionForward(const AttentionArgs& a, Stream stream) {
  if (a.batch == 0 || a.l == 0) return;
  // bf16/f16 with head size 64 or 128: the tensor-core kernels (attention_tc.cu).
  if (AttentionForwardTensorCores(a, AsStream(stream))) return;
  const Dims dm = MakeDims(a);
  int tiles = 0;
  const unsigned blocks = TileBlocks(a.batch, a.l, kFwdRows, &tiles);
  DispatchDtype<DtypeSet::kFloat>(a.type, "AttentionForward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    DispatchShape(a.e, a.causal, [&](auto d, auto c) {
      constexpr int kD = decltype(d)::value;
      const auto kernel = ForwardKernel<T, kD, decltype(c)::value>;
      AllowSmem(kernel, ForwardSmem(kD));
      kernel<<<blocks, kThreads, ForwardSmem(kD), AsStream(stream)>>>(
          OperandOf<const T>(a.q), OperandOf<const T>(a.k), OperandOf<const T>(a.v),
          OperandOf<T>(a.out), a.lse, dm, tiles);
      CheckLaunch("AttentionForward");
    });
  });
}

void CudaBackendImpl::AttentionBackward(const AttentionArgs& a, Stream stream) {
  if (a.batch == 0 || (a.l == 0 && a.s == 0)) return;
  if (AttentionBackwardTensorCores(a, AsStream(stream))) return;
  const Dims dm = MakeDims(a);
  const cudaStream_t st = AsStream(stream);
  const int64_t rows = a.batch * a.l;
  // D: (batch, l), stream-ordered scratch
  float* dvec = rows > 0 ? Scratch<float>("AttentionBackward", rows, st) : nullptr;
  int key_tiles = 0, query_tiles = 0;
  const unsigned key_blocks = TileBlocks(a.batch, a.s, kKgKeys, &key_tiles);
  const unsigned query_blocks = rows > 0 ? TileBlocks(a.batch, a.l, kQgRows, &query_tiles) : 0;
  DispatchDtype<DtypeSet::kFloat>(a.type, "AttentionBackward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto q = OperandOf<const T>(a.q), k = OperandOf<const T>(a.k);
    const auto v = OperandOf<const T>(a.v), gout = OperandOf<const T>(a.gout);
    if (rows > 0) {
      RowDotKernel<T><<<BlocksFor(rows, kThreads / 32), kThreads, 0, st>>>(
          gout, OperandOf<const T>(a.out), dvec, rows, dm);
      CheckLaunch("AttentionBackward (D)");
    }
    DispatchShape(a.e, a.causal, [&](auto d, auto c) {
      constexpr int kD = decltype(d)::value;
      constexpr bool kCausal = decltype(c)::value;
      const auto key_kernel = KeyGradKernel<T, kD, kCausal>;
      AllowSmem(key_kernel, KeyGradSmem(kD));
      key_kernel<<<key_blocks, kThreads, KeyGradSmem(kD), st>>>(
          q, k, v, gout, a.lse, dvec, OperandOf<T>(a.gk), OperandOf<T>(a.gv), dm, key_tiles);
      CheckLaunch("AttentionBackward (gk, gv)");
      if (rows == 0) return;
      const auto query_kernel = QueryGradKernel<T, kD, kCausal>;
      AllowSmem(query_kernel, QueryGradSmem(kD));
      query_kernel<<<query_blocks, kThreads, QueryGradSmem(kD), st>>>(
          q, k, v, gout, a.lse, dvec, OperandOf<T>(a.gq), dm, query_tiles);
      CheckLaunch("AttentionBackward (gq)");
    });
  });
  if (dvec != nullptr) TY_CUDA_CHECK(cudaFreeAsync(dvec, st));
}

}  // namespace trainyard::kernels::cuda
