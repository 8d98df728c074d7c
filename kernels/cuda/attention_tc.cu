// Fused attention on tensor cores (attention_tc.h): FlashAttention-2 with the WMMA API, bf16/f16
// 16x16x16 fragments with f32 accumulators. Semantics are those of kernels/cpu/attention.h and
// attention.cu: P = softmax_j(scale * q_i . k_j) over keys j < s, and j <= i when causal
// (top-left aligned, also when l != s); out_i = sum_j P_ij v_j; lse_i in natural-log units.
//
// Note [Tensor-core attention]
// Forward: a block of 4 warps owns 64 query rows, 16 per warp, and walks key tiles of 64 (when
// causal, only those with a key at or below the block's last row). Per tile and warp:
//   S = Q K^T    wmma; Q fragments stay in registers, K comes from shared memory
//   softmax      S goes through shared memory as f32, two lanes per row (odd and even
//                columns): mask, scores in log2 units, P = exp2(S - m) rounded to the storage
//                type into shared memory
//   O += P V     wmma; the O accumulators stay in registers
// The running maximum m moves only when a tile's maximum exceeds it by more than kMaxSlack (log2
// units), so P <= 2^kMaxSlack (fine for bf16 and f16) and O is rescaled rarely. A rescale
// multiplies each fragment element by its row's factor: the row of every accumulator element is
// found once by loading a matrix of row numbers into an accumulator fragment (the element layout
// is unspecified, but it is the same for every fragment of one type). K(t+1) is copied with
// cp.async while tile t's softmax and P V run, V(t+1) while tile t+1's S runs.
//
// Backward: D_i = sum_d gout_id out_id first. Then a block of 8 warps per key tile of 64 walks
// query tiles of 32 (from the key tile's first key on when causal), Q, gout, lse and D
// double-buffered with cp.async:
//   S = Q K^T, dP = gout V^T   one 16x16 tile of each per warp, to shared memory as f32
//   P = exp2(S scale log2(e) - lse log2(e)), dS = P (dP - D), elementwise, rounded to storage
//   dV += P^T gout, dK += dS^T Q   each warp owns 16 keys and half of e; registers
//   dQ += dS K   per warp 16x16 tiles, staged in shared memory and added with f32 atomics to a
//                scratch (batch, l, e); a last kernel writes gq = scale * dQ in the storage type
// and gk = scale * dK, gv = dV at the end of the block. The atomics make gq's rounding depend on
// the order of the key tiles (gk and gv are deterministic).
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cuda_check.h"

namespace trainyard::kernels::cuda {
namespace {

namespace wmma = nvcuda::wmma;

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major>;  // A^T stored
template <typename T>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;  // B^T stored
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kFwdWarps = 4, kFwdRows = 16 * kFwdWarps, kFwdKeys = 64;
constexpr int kBwdWarps = 8, kBwdKeys = 64, kBwdRows = 32;
constexpr float kMaxSlack = 8.0f;  // log2 units (Note [Tensor-core attention])
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Dims {
  int l, s;
  int heads;         // AttentionArgs::heads: how operands address batch items
  float scale;       // as given
  float scale_log2;  // scale * log2(e): scores in log2 units
};

constexpr int Max(int a, int b) { return a > b ? a : b; }

// The block's dynamic shared memory.
__device__ __forceinline__ unsigned char* SharedBytes() {
  extern __shared__ __align__(128) unsigned char ty_tc_smem[];
  return ty_tc_smem;
}

// Starts copying rows [row0, row0 + kRows) of src (n, kD), rows ld apart, into dst (kRows,
// kD + 8) in shared memory with cp.async (16 bytes a copy); rows past n are zeroed with plain
// stores. The caller commits and waits.
template <typename T, int kD, int kRows, int kThreads>
__device__ __forceinline__ void LoadTileAsync(T* dst, const T* src, int64_t ld, int row0, int n) {
  constexpr int kChunks = kD / 8;  // 16-byte pieces per row
#pragma unroll 4
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    T* d = dst + r * (kD + 8) + c * 8;
    if (row0 + r < n) {
      __pipeline_memcpy_async(d, src + (row0 + r) * ld + c * 8, 16);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  }
}

struct alignas(16) Pack8 {  // 8 storage elements, one 16-byte store
  unsigned short bits[8];
};

__device__ __forceinline__ unsigned short Bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ unsigned short Bits(__half v) { return __half_as_ushort(v); }

// dst rows [row0, row0 + kRows) of (n, kD), rows dst_ld apart, = factor * src (kRows, ld) f32
// in shared memory, rows past n skipped; 16-byte stores.
template <typename T, int kD, int kRows>
__device__ __forceinline__ void StoreStagedRows(T* dst, int64_t dst_ld, const float* src, int ld,
                                                int row0, int n, float factor, int first,
                                                int step) {
  for (int idx = first; idx < kRows * (kD / 8); idx += step) {
    const int r = idx / (kD / 8), c = idx % (kD / 8) * 8;
    if (row0 + r >= n) continue;
    Pack8 p;
#pragma unroll
    for (int i = 0; i < 8; ++i) p.bits[i] = Bits(FromFloat<T>(src[r * ld + c + i] * factor));
    *reinterpret_cast<Pack8*>(dst + (row0 + r) * dst_ld + c) = p;
  }
}

// ---- Forward ----

// Shared-memory byte offsets for head size kD. Tiles of the storage type have rows of kD + 8
// elements: 16-byte aligned rows whose 16-byte pieces cycle through all banks.
template <int kD>
struct FwdLayout {
  static constexpr int kLd = kD + 8;         // K, V, Q tiles (storage type)
  static constexpr int kSLd = kFwdKeys + 4;  // scores (f32)
  static constexpr int kPLd = kFwdKeys + 8;  // probabilities (storage type)
  static constexpr int kOLd = kD + 4;        // output staging (f32), over the K and V tiles
  static constexpr int kTile = kFwdKeys * kLd * 2;
  static constexpr int kK = 0, kV = kTile, kQ = 2 * kTile;  // scores over Q once in registers
  static constexpr int kP = kQ + Max(kFwdRows * kLd * 2, kFwdRows* kSLd * 4);
  static constexpr int kRowIds = kP + kFwdRows * kPLd * 2;  // 16x16 f32 row numbers
  static constexpr int kFactor = kRowIds + 256 * 4;         // per-row factors (kFwdRows f32)
  static constexpr int kBytes = kFactor + kFwdRows * 4;
  static_assert(kFwdRows * kOLd * 4 <= 2 * kTile, "output staging must fit over K and V");
};

// Row numbers of an accumulator fragment's elements (Note [Tensor-core attention]); ids is a
// shared 16x16 f32 matrix with ids[r][c] = r.
__device__ __forceinline__ void RowsOf(const float* ids, int (&rows)[FragC::num_elements]) {
  FragC f;
  wmma::load_matrix_sync(f, ids, 16, wmma::mem_row_major);
#pragma unroll
  for (int i = 0; i < FragC::num_elements; ++i) rows[i] = static_cast<int>(f.x[i]);
}

// One key tile of the online softmax for row `row` (local row lane / 2 of the warp), the lane
// taking columns 2 i + lane % 2 of the raw scores sw (16, kSLd). Writes P to pw (16, kPLd),
// updates m and sum and returns the factor for the row's O (exactly 1 when m did not move).
template <typename T, bool kCausal>
__device__ __forceinline__ float SoftmaxTile(const float* sw, T* pw, int row, int k0,
                                             const Dims& dm, float& m, float& sum) {
  constexpr int kSLd = kFwdKeys + 4, kPLd = kFwdKeys + 8, kN = kFwdKeys / 2;
  const int r = threadIdx.x % 32 / 2, h = threadIdx.x % 2;
  float x[kN];
  float tile_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const int c = 2 * i + h, col = k0 + c;
    const bool ok = col < dm.s && (!kCausal || col <= row);
    x[i] = ok ? sw[r * kSLd + c] * dm.scale_log2 : -INFINITY;
    tile_max = fmaxf(tile_max, x[i]);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  const bool move = tile_max > m + kMaxSlack;  // any finite maximum moves m = -inf
  const float m_new = move ? tile_max : m;
  const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: P = 0
  float row_sum = 0;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const float p = exp2f(x[i] - base);
    pw[r * kPLd + 2 * i + h] = FromFloat<T>(p);
    row_sum += p;
  }
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
  const float alpha = move ? exp2f(m - base) : 1.0f;
  sum = sum * alpha + row_sum;
  m = m_new;
  return alpha;
}

// sc[j] = the warp's Q (fragments qf) times key subtile j of ks (64, kD + 8), for j < subtiles
// (zero past it).
template <typename T, int kD>
__device__ __forceinline__ void WarpScores(const FragA<T> (&qf)[kD / 16], const T* ks, int subtiles,
                                           FragC (&sc)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    wmma::fill_fragment(sc[j], 0.0f);
    if (j >= subtiles) continue;
#pragma unroll
    for (int x = 0; x < kD / 16; ++x) {
      FragBT<T> kf;
      wmma::load_matrix_sync(kf, ks + 16 * j * (kD + 8) + 16 * x, kD + 8);
      wmma::mma_sync(sc[j], qf[x], kf, sc[j]);
    }
  }
}

// o += P (the warp's pw, 16 x kFwdKeys) V (vs, 64 x kD), key subtiles j < subtiles only.
template <typename T, int kD>
__device__ __forceinline__ void WarpAccumulatePV(FragC (&o)[kD / 16], const T* pw, const T* vs,
                                                 int subtiles) {
  FragA<T> pf[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) wmma::load_matrix_sync(pf[j], pw + 16 * j, kFwdKeys + 8);
#pragma unroll
  for (int x = 0; x < kD / 16; ++x) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j >= subtiles) continue;
      FragB<T> vf;
      wmma::load_matrix_sync(vf, vs + 16 * j * (kD + 8) + 16 * x, kD + 8);
      wmma::mma_sync(o[x], pf[j], vf, o[x]);
    }
  }
}

// Multiplies row r of the warp's O by factor[r] (rows: RowsOf).
template <int kX>
__device__ __forceinline__ void ScaleRows(FragC (&o)[kX], const int (&rows)[FragC::num_elements],
                                          const float* factor) {
#pragma unroll
  for (int x = 0; x < kX; ++x) {
#pragma unroll
    for (int i = 0; i < FragC::num_elements; ++i) o[x].x[i] *= factor[rows[i]];
  }
}

// dst rows [row0, row0 + 16) of (n, kD), rows dst_ld apart, = the warp's o, through its f32
// staging os (16, kD + 4).
template <typename T, int kD>
__device__ __forceinline__ void WarpStoreRows(const FragC (&o)[kD / 16], float* os, T* dst,
                                              int64_t dst_ld, int row0, int n) {
#pragma unroll
  for (int x = 0; x < kD / 16; ++x) {
    wmma::store_matrix_sync(os + 16 * x, o[x], kD + 4, wmma::mem_row_major);
  }
  __syncwarp();
  StoreStagedRows<T, kD, 16>(dst, dst_ld, os, kD + 4, row0, n, 1.0f, threadIdx.x % 32, 32);
}

// Grid (batch, ceil(l / kFwdRows)), the last query tiles (the heaviest when causal) first.
// q, out: (batch, l, kD); k, v: (batch, s, kD); lse: (batch, l).
template <typename T, int kD, bool kCausal>
__global__ void __launch_bounds__(kFwdWarps * 32)
    ForwardKernel(Operand<const T> q, Operand<const T> k, Operand<const T> v, Operand<T> out,
                  float* lse, Dims dm) {
  using L = FwdLayout<kD>;
  constexpr int kX = kD / 16, kThreads = kFwdWarps * 32;
  unsigned char* smem = SharedBytes();
  T* ks = reinterpret_cast<T*>(smem + L::kK);
  T* vs = reinterpret_cast<T*>(smem + L::kV);
  T* qs = reinterpret_cast<T*>(smem + L::kQ);
  float* ids = reinterpret_cast<float*>(smem + L::kRowIds);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = reinterpret_cast<float*>(smem + L::kQ) + warp * 16 * L::kSLd;
  T* pw = reinterpret_cast<T*>(smem + L::kP) + warp * 16 * L::kPLd;
  float* factor = reinterpret_cast<float*>(smem + L::kFactor) + warp * 16;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kFwdRows;
  const int64_t b = blockIdx.x;
  const T* kb = k.Item(b, dm.heads);
  const T* vb = v.Item(b, dm.heads);
  const int kv_end = kCausal ? min(dm.s, q0 + kFwdRows) : dm.s;
  const int tiles = (kv_end + kFwdKeys - 1) / kFwdKeys;  // at least 1
  // Causal: keys past the warp's last row are masked for all its rows.
  const int warp_keys = kCausal ? min(kv_end, q0 + 16 * warp + 16) : kv_end;
  LoadTileAsync<T, kD, kFwdRows, kThreads>(qs, q.Item(b, dm.heads), q.row, q0, dm.l);
  LoadTileAsync<T, kD, kFwdKeys, kThreads>(ks, kb, k.row, 0, dm.s);
  __pipeline_commit();
  LoadTileAsync<T, kD, kFwdKeys, kThreads>(vs, vb, v.row, 0, dm.s);
  __pipeline_commit();
  for (int i = threadIdx.x; i < 256; i += kThreads) ids[i] = static_cast<float>(i / 16);
  __pipeline_wait_prior(1);  // Q and K(0)
  __syncthreads();
  FragA<T> qf[kX];
#pragma unroll
  for (int x = 0; x < kX; ++x)
    wmma::load_matrix_sync(qf[x], qs + warp * 16 * L::kLd + 16 * x, L::kLd);
  int rows[FragC::num_elements];
  RowsOf(ids, rows);
  FragC o[kX];
#pragma unroll
  for (int x = 0; x < kX; ++x) wmma::fill_fragment(o[x], 0.0f);
  const int row = q0 + warp * 16 + lane / 2;  // the lane's row in the softmax
  float m = -INFINITY, sum = 0;
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * kFwdKeys;
    const int subtiles = min(4, (warp_keys - k0 + 15) / 16);  // key subtiles with a visible key
    FragC sc[4];
    WarpScores<T, kD>(qf, ks, subtiles, sc);
    __syncthreads();  // every warp is done with K(t) (and, the first time, with Q)
    if (t + 1 < tiles) LoadTileAsync<T, kD, kFwdKeys, kThreads>(ks, kb, k.row, k0 + kFwdKeys, dm.s);
    __pipeline_commit();
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(sw + 16 * j, sc[j], L::kSLd, wmma::mem_row_major);
    __syncwarp();
    const float alpha = SoftmaxTile<T, kCausal>(sw, pw, row, k0, dm, m, sum);
    if (__any_sync(0xffffffffu, t > 0 && alpha != 1.0f)) {
      if (lane % 2 == 0) factor[lane / 2] = alpha;
      __syncwarp();
      ScaleRows(o, rows, factor);
    }
    __pipeline_wait_prior(1);  // V(t)
    __syncthreads();           // ... for every thread's copies; P is in shared memory
    WarpAccumulatePV<T, kD>(o, pw, vs, subtiles);
    __syncthreads();  // every warp is done with V(t)
    if (t + 1 < tiles) LoadTileAsync<T, kD, kFwdKeys, kThreads>(vs, vb, v.row, k0 + kFwdKeys, dm.s);
    __pipeline_commit();
    __pipeline_wait_prior(1);  // K(t + 1)
    __syncthreads();
  }
  __pipeline_wait_prior(0);
  // out = O / sum through f32 staging over the K and V tiles (no warp reads them any more).
  if (lane % 2 == 0) factor[lane / 2] = sum > 0 ? 1.0f / sum : 0.0f;
  __syncwarp();
  ScaleRows(o, rows, factor);
  float* os = reinterpret_cast<float*>(smem + L::kK) + warp * 16 * L::kOLd;
  WarpStoreRows<T, kD>(o, os, out.Item(b, dm.heads), out.row, q0 + warp * 16, dm.l);
  if (lane % 2 == 0 && row < dm.l) {
    lse[b * dm.l + row] = sum > 0 ? m * kLn2 + logf(sum) : INFINITY;
  }
}

// ---- Backward ----

// dvec[r] = sum_d gout[r, d] out[r, d] over the batch * l rows r = b * l + i (row i of item
// b); a warp per row.
template <typename T, int kD>
__global__ void __launch_bounds__(256)
    RowDotKernel(Operand<const T> gout, Operand<const T> out, float* dvec, int64_t rows, Dims dm) {
  const int lane = threadIdx.x % 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * 8;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32; r < rows; r += step) {
    const int64_t b = r / dm.l, i = r % dm.l;
    const T* g = gout.Item(b, dm.heads) + i * gout.row;
    const T* y = out.Item(b, dm.heads) + i * out.row;
    float acc = 0;
#pragma unroll
    for (int d = lane; d < kD; d += 32) acc += Load(g + d) * Load(y + d);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) dvec[r] = acc;
  }
}

// gq = scale * dq (batch * l rows r = b * l + i of kD, contiguous) in the storage type; a warp
// per row.
template <typename T, int kD>
__global__ void __launch_bounds__(256)
    ScaleConvertKernel(const float* dq, Operand<T> gq, int64_t rows, Dims dm) {
  const int lane = threadIdx.x % 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * 8;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32; r < rows; r += step) {
    const int64_t b = r / dm.l, i = r % dm.l;
    T* dst = gq.Item(b, dm.heads) + i * gq.row;
#pragma unroll
    for (int d = lane; d < kD; d += 32) dst[d] = FromFloat<T>(dq[r * kD + d] * dm.scale);
  }
}

// Shared-memory byte offsets for head size kD; Q, gout, lse and D have two buffers each.
template <int kD>
struct BwdLayout {
  static constexpr int kLd = kD + 8;         // K, V, Q, gout tiles (storage type)
  static constexpr int kSLd = kBwdKeys + 4;  // S, dP (f32)
  static constexpr int kPLd = kBwdKeys + 8;  // P, dS (storage type)
  static constexpr int kOLd = kD + 4;        // gk, gv staging (f32), over the K and V tiles
  static constexpr int kKTile = kBwdKeys * kLd * 2, kQTile = kBwdRows * kLd * 2;
  static constexpr int kK = 0, kV = kKTile, kQ = 2 * kKTile, kGo = kQ + 2 * kQTile;
  static constexpr int kS = kGo + 2 * kQTile, kDP = kS + kBwdRows * kSLd * 4;
  static constexpr int kP = kDP + kBwdRows * kSLd * 4, kDS = kP + kBwdRows * kPLd * 2;
  static constexpr int kLse = kDS + kBwdRows * kPLd * 2, kDvec = kLse + 2 * kBwdRows * 4;
  static constexpr int kBytes = kDvec + 2 * kBwdRows * 4;
  static_assert(kBwdKeys * kOLd * 4 <= 2 * kKTile, "gk/gv staging must fit over K and V");
  static_assert(kBwdWarps * 256 * 4 <= kBwdRows * kSLd * 4, "dQ staging must fit over S");
};

// Starts copying query tile q0 (Q and gout rows, lse, D) into buffer `buf`.
template <typename T, int kD>
__device__ __forceinline__ void LoadQueryTileAsync(unsigned char* smem, int buf, const T* qb,
                                                   int64_t q_ld, const T* gob, int64_t go_ld,
                                                   const float* lseb, const float* db, int q0,
                                                   int l) {
  using L = BwdLayout<kD>;
  constexpr int kThreads = kBwdWarps * 32;
  LoadTileAsync<T, kD, kBwdRows, kThreads>(reinterpret_cast<T*>(smem + L::kQ + buf * L::kQTile), qb,
                                           q_ld, q0, l);
  LoadTileAsync<T, kD, kBwdRows, kThreads>(reinterpret_cast<T*>(smem + L::kGo + buf * L::kQTile),
                                           gob, go_ld, q0, l);
  if (threadIdx.x < kBwdRows) {
    const int r = threadIdx.x;
    float* lse_s = reinterpret_cast<float*>(smem + L::kLse) + buf * kBwdRows + r;
    float* d_s = reinterpret_cast<float*>(smem + L::kDvec) + buf * kBwdRows + r;
    if (q0 + r < l) {
      __pipeline_memcpy_async(lse_s, lseb + q0 + r, 4);
      __pipeline_memcpy_async(d_s, db + q0 + r, 4);
    } else {
      *lse_s = INFINITY;  // P = 0
      *d_s = 0;
    }
  }
}

// P and dS of the tile from S and dP (all in shared memory), masked.
template <typename T, int kD, bool kCausal>
__device__ __forceinline__ void ScoreGrads(unsigned char* smem, int buf, int q0, int k0,
                                           const Dims& dm) {
  using L = BwdLayout<kD>;
  const float* ss = reinterpret_cast<const float*>(smem + L::kS);
  const float* dps = reinterpret_cast<const float*>(smem + L::kDP);
  const float* lse_s = reinterpret_cast<const float*>(smem + L::kLse) + buf * kBwdRows;
  const float* d_s = reinterpret_cast<const float*>(smem + L::kDvec) + buf * kBwdRows;
  T* ps = reinterpret_cast<T*>(smem + L::kP);
  T* dss = reinterpret_cast<T*>(smem + L::kDS);
#pragma unroll
  for (int idx = threadIdx.x; idx < kBwdRows * kBwdKeys; idx += kBwdWarps * 32) {
    const int r = idx / kBwdKeys, c = idx % kBwdKeys, row = q0 + r, col = k0 + c;
    const bool ok = row < dm.l && col < dm.s && (!kCausal || col <= row);
    const float p = ok ? exp2f(ss[r * L::kSLd + c] * dm.scale_log2 - lse_s[r] * kLog2e) : 0.0f;
    ps[r * L::kPLd + c] = FromFloat<T>(p);
    dss[r * L::kPLd + c] = FromFloat<T>(ok ? p * (dps[r * L::kSLd + c] - d_s[r]) : 0.0f);
  }
}

// Warp roles in the backward: TileScores computes the (query block warp / 4, key block warp % 4)
// tile of S and dP; the key-gradient accumulators of a warp are keys 16 (warp % 4) and half
// warp / 4 of kD.

// S = Q K^T and dP = gout V^T for the warp's 16x16 tile, to shared memory as f32.
template <typename T, int kD>
__device__ __forceinline__ void TileScores(unsigned char* smem, const T* qs, const T* gos,
                                           int warp) {
  using L = BwdLayout<kD>;
  const T* ks = reinterpret_cast<const T*>(smem + L::kK);
  const T* vs = reinterpret_cast<const T*>(smem + L::kV);
  const int rb = warp / 4, cb = warp % 4;
  FragC sc, dp;
  wmma::fill_fragment(sc, 0.0f);
  wmma::fill_fragment(dp, 0.0f);
#pragma unroll 1  // fully unrolled, bf16 with e = 128 spills at 2 blocks per SM
  for (int x = 0; x < kD / 16; ++x) {
    FragA<T> a;
    FragBT<T> bt;
    wmma::load_matrix_sync(a, qs + 16 * rb * L::kLd + 16 * x, L::kLd);
    wmma::load_matrix_sync(bt, ks + 16 * cb * L::kLd + 16 * x, L::kLd);
    wmma::mma_sync(sc, a, bt, sc);
    wmma::load_matrix_sync(a, gos + 16 * rb * L::kLd + 16 * x, L::kLd);
    wmma::load_matrix_sync(bt, vs + 16 * cb * L::kLd + 16 * x, L::kLd);
    wmma::mma_sync(dp, a, bt, dp);
  }
  const int off = 16 * rb * L::kSLd + 16 * cb;
  wmma::store_matrix_sync(reinterpret_cast<float*>(smem + L::kS) + off, sc, L::kSLd,
                          wmma::mem_row_major);
  wmma::store_matrix_sync(reinterpret_cast<float*>(smem + L::kDP) + off, dp, L::kSLd,
                          wmma::mem_row_major);
}

// dv += P^T gout and dk += dS^T Q over the tile's kBwdRows queries, for the warp's keys and half.
template <typename T, int kD>
__device__ __forceinline__ void AccumulateKeyGrads(const unsigned char* smem, const T* qs,
                                                   const T* gos, int warp, FragC (&dv)[kD / 32],
                                                   FragC (&dk)[kD / 32]) {
  using L = BwdLayout<kD>;
  const T* ps = reinterpret_cast<const T*>(smem + L::kP);
  const T* dss = reinterpret_cast<const T*>(smem + L::kDS);
  const int kbk = warp % 4, half = warp / 4;
  // Not unrolled: each pass has 8 MMAs of its own, and unrolled, f16 with e = 128 spilled on
  // sm_90 (ptxas -v: 8 bytes). bf16 with e = 128 still spills on sm_80 (52-56 bytes).
#pragma unroll 1
  for (int j = 0; j < kBwdRows / 16; ++j) {
    FragAT<T> pt, dst;
    wmma::load_matrix_sync(pt, ps + 16 * j * L::kPLd + 16 * kbk, L::kPLd);
    wmma::load_matrix_sync(dst, dss + 16 * j * L::kPLd + 16 * kbk, L::kPLd);
#pragma unroll
    for (int x = 0; x < kD / 32; ++x) {
      const int col = half * (kD / 2) + 16 * x;
      FragB<T> f;
      wmma::load_matrix_sync(f, gos + 16 * j * L::kLd + col, L::kLd);
      wmma::mma_sync(dv[x], pt, f, dv[x]);
      wmma::load_matrix_sync(f, qs + 16 * j * L::kLd + col, L::kLd);
      wmma::mma_sync(dk[x], dst, f, dk[x]);
    }
  }
}

// dq rows [q0, q0 + kBwdRows) of (l, kD) += dS K: the warp's 16x16 tiles are staged over S
// (free once ScoreGrads is done) and added with f32 atomics.
template <typename T, int kD>
__device__ __forceinline__ void AddQueryGrads(unsigned char* smem, int warp, int q0, float* dq,
                                              int l) {
  using L = BwdLayout<kD>;
  const T* ks = reinterpret_cast<const T*>(smem + L::kK);
  const T* dss = reinterpret_cast<const T*>(smem + L::kDS);
  float* stage = reinterpret_cast<float*>(smem + L::kS) + warp * 256;
  const int lane = threadIdx.x % 32;
  for (int tile = warp; tile < (kBwdRows / 16) * (kD / 16); tile += kBwdWarps) {
    const int tr = tile % (kBwdRows / 16), tc = tile / (kBwdRows / 16);
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int j = 0; j < kBwdKeys / 16; ++j) {
      FragA<T> a;
      FragB<T> f;
      wmma::load_matrix_sync(a, dss + 16 * tr * L::kPLd + 16 * j, L::kPLd);
      wmma::load_matrix_sync(f, ks + 16 * j * L::kLd + 16 * tc, L::kLd);
      wmma::mma_sync(acc, a, f, acc);
    }
    wmma::store_matrix_sync(stage, acc, 16, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int i = lane; i < 256; i += 32) {
      const int row = q0 + 16 * tr + i / 16;
      if (row < l) atomicAdd(dq + static_cast<int64_t>(row) * kD + 16 * tc + i % 16, stage[i]);
    }
    __syncwarp();
  }
}

// dst rows [k0, k0 + kBwdKeys) of (s, kD), rows dst_ld apart, = factor * the block's
// key-gradient accumulators, staged through os (kBwdKeys, kOLd) f32. Called by the whole block.
template <typename T, int kD>
__device__ __forceinline__ void StoreKeyGrads(const FragC (&acc)[kD / 32], float* os, T* dst,
                                              int64_t dst_ld, int warp, int k0, int s,
                                              float factor) {
  using L = BwdLayout<kD>;
  const int kbk = warp % 4, half = warp / 4;
#pragma unroll
  for (int x = 0; x < kD / 32; ++x) {
    wmma::store_matrix_sync(os + 16 * kbk * L::kOLd + half * (kD / 2) + 16 * x, acc[x], L::kOLd,
                            wmma::mem_row_major);
  }
  __syncthreads();
  StoreStagedRows<T, kD, kBwdKeys>(dst, dst_ld, os, L::kOLd, k0, s, factor, threadIdx.x,
                                   kBwdWarps * 32);
  __syncthreads();
}

// Grid (batch, ceil(s / kBwdKeys)), the first key tiles (the heaviest when causal) first.
// dq: (batch, l, kD) f32 scratch, zeroed; gk, gv: (batch, s, kD).
template <typename T, int kD, bool kCausal>
__global__ void __launch_bounds__(kBwdWarps * 32, 2)
    BackwardKernel(Operand<const T> q, Operand<const T> k, Operand<const T> v,
                   Operand<const T> gout, const float* lse, const float* dvec, float* dq,
                   Operand<T> gk, Operand<T> gv, Dims dm) {
  using L = BwdLayout<kD>;
  constexpr int kThreads = kBwdWarps * 32, kXh = kD / 32;  // fragments per half of kD
  unsigned char* smem = SharedBytes();
  const int warp = threadIdx.x / 32;
  const int k0 = blockIdx.y * kBwdKeys;
  const int64_t b = blockIdx.x;
  const T* qb = q.Item(b, dm.heads);
  const T* gob = gout.Item(b, dm.heads);
  const int q_begin = kCausal ? k0 : 0;  // causal: rows before k0 see none of these keys
  const int tiles = q_begin < dm.l ? (dm.l - q_begin + kBwdRows - 1) / kBwdRows : 0;
  LoadTileAsync<T, kD, kBwdKeys, kThreads>(reinterpret_cast<T*>(smem + L::kK), k.Item(b, dm.heads),
                                           k.row, k0, dm.s);
  LoadTileAsync<T, kD, kBwdKeys, kThreads>(reinterpret_cast<T*>(smem + L::kV), v.Item(b, dm.heads),
                                           v.row, k0, dm.s);
  if (tiles > 0) {
    LoadQueryTileAsync<T, kD>(smem, 0, qb, q.row, gob, gout.row, lse + b * dm.l, dvec + b * dm.l,
                              q_begin, dm.l);
  }
  __pipeline_commit();
  FragC dv[kXh], dk[kXh];
#pragma unroll
  for (int x = 0; x < kXh; ++x) {
    wmma::fill_fragment(dv[x], 0.0f);
    wmma::fill_fragment(dk[x], 0.0f);
  }
  for (int t = 0; t < tiles; ++t) {
    const int q0 = q_begin + t * kBwdRows, buf = t % 2;
    __pipeline_wait_prior(0);  // tile t
    __syncthreads();           // ... for every thread's copies; tile t - 1 is done with
    if (t + 1 < tiles) {
      LoadQueryTileAsync<T, kD>(smem, buf ^ 1, qb, q.row, gob, gout.row, lse + b * dm.l,
                                dvec + b * dm.l, q0 + kBwdRows, dm.l);
    }
    __pipeline_commit();
    const T* qs = reinterpret_cast<const T*>(smem + L::kQ + buf * L::kQTile);
    const T* gos = reinterpret_cast<const T*>(smem + L::kGo + buf * L::kQTile);
    TileScores<T, kD>(smem, qs, gos, warp);
    __syncthreads();
    ScoreGrads<T, kD, kCausal>(smem, buf, q0, k0, dm);
    __syncthreads();
    AccumulateKeyGrads<T, kD>(smem, qs, gos, warp, dv, dk);
    AddQueryGrads<T, kD>(smem, warp, q0, dq + b * dm.l * kD, dm.l);
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // every warp is done with K and V: stage gv, then gk, over them
  float* os = reinterpret_cast<float*>(smem + L::kK);
  StoreKeyGrads<T, kD>(dv, os, gv.Item(b, dm.heads), gv.row, warp, k0, dm.s, 1.0f);
  StoreKeyGrads<T, kD>(dk, os, gk.Item(b, dm.heads), gk.row, warp, k0, dm.s, dm.scale);
}

// ---- Host ----

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>, integral_constant<int, e>, bool_constant<causal>) for a supported case.
template <typename F>
void Dispatch(ScalarType type, int64_t e, bool causal, const F& f) {
  const auto with_type = [&](auto t) {
    const auto with_d = [&](auto d) {
      if (causal) {
        f(t, d, std::true_type{});
      } else {
        f(t, d, std::false_type{});
      }
    };
    if (e == 64) {
      with_d(std::integral_constant<int, 64>{});
    } else {
      with_d(std::integral_constant<int, 128>{});
    }
  };
  if (type == ScalarType::kBF16) {
    with_type(TypeTag<__nv_bfloat16>{});
  } else {
    with_type(TypeTag<__half>{});
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether these kernels take the call: the operands' rows must be 16-byte aligned for cp.async
// and the 16-byte stores.
bool Supported(const AttentionArgs& a, std::initializer_list<const AttentionTensor*> operands) {
  if (a.type != ScalarType::kBF16 && a.type != ScalarType::kF16) return false;
  if (a.e != 64 && a.e != 128) return false;
  if (a.batch < 0 || a.batch > INT_MAX || a.heads < 1 || a.heads > INT_MAX || a.l < 0 ||
      a.l > INT_MAX - 64 || a.s < 1 || a.s > INT_MAX - 64) {
    return false;
  }
  if (CeilDiv(a.l, kFwdRows) > 65535 || CeilDiv(a.s, kBwdKeys) > 65535) return false;  // grid.y
  for (const AttentionTensor* t : operands) {
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
    if (t->outer % 8 != 0 || t->inner % 8 != 0 || t->row % 8 != 0) return false;  // 2-byte types
  }
  return true;
}

Dims MakeDims(const AttentionArgs& a) {
  return Dims{static_cast<int>(a.l), static_cast<int>(a.s), static_cast<int>(a.heads),
              static_cast<float>(a.scale), static_cast<float>(a.scale * 1.4426950408889634)};
}

template <typename... Params, typename... Args>
void Launch(const char* name, void (*kernel)(Params...), dim3 grid, int threads, int smem,
            cudaStream_t stream, Args... args) {
  if (smem > 48 * 1024) {
    TY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
  TY_CHECK(err == cudaSuccess) << name << ": kernel launch failed: " << cudaGetErrorString(err);
  CheckLaunch(name);
}

}  // namespace

size_t AttentionTensorCoresSmem(ScalarType type, int64_t e) {
  if ((type != ScalarType::kBF16 && type != ScalarType::kF16) || (e != 64 && e != 128)) return 0;
  return e == 64 ? std::max<size_t>(FwdLayout<64>::kBytes, BwdLayout<64>::kBytes)
                 : std::max<size_t>(FwdLayout<128>::kBytes, BwdLayout<128>::kBytes);
}

bool AttentionForwardTensorCores(const AttentionArgs& a, cudaStream_t stream) {
  if (!Supported(a, {&a.q, &a.k, &a.v, &a.out})) return false;
  if (a.batch == 0 || a.l == 0) return true;
  const Dims dm = MakeDims(a);
  const dim3 grid(static_cast<unsigned>(a.batch), static_cast<unsigned>(CeilDiv(a.l, kFwdRows)), 1);
  Dispatch(a.type, a.e, a.causal, [&](auto t, auto d, auto c) {
    using T = typename decltype(t)::type;
    constexpr int kD = decltype(d)::value;
    Launch("AttentionForwardTensorCores", ForwardKernel<T, kD, decltype(c)::value>, grid,
           kFwdWarps * 32, FwdLayout<kD>::kBytes, stream, OperandOf<const T>(a.q),
           OperandOf<const T>(a.k), OperandOf<const T>(a.v), OperandOf<T>(a.out), a.lse, dm);
  });
  return true;
}

bool AttentionBackwardTensorCores(const AttentionArgs& a, cudaStream_t stream) {
  if (!Supported(a, {&a.q, &a.k, &a.v, &a.out, &a.gout, &a.gq, &a.gk, &a.gv})) return false;
  if (a.batch == 0) return true;
  const Dims dm = MakeDims(a);
  const int64_t rows = a.batch * a.l, e = a.e;
  float* dq = nullptr;  // (batch, l, e) f32, then D (batch, l); stream-ordered scratch
  if (rows > 0) {
    const size_t bytes = static_cast<size_t>(rows) * (e + 1) * sizeof(float);
    dq = static_cast<float*>(AllocOrDie("AttentionBackwardTensorCores", bytes, stream));
    TY_CUDA_CHECK(cudaMemsetAsync(dq, 0, static_cast<size_t>(rows) * e * sizeof(float), stream));
  }
  float* dvec = rows > 0 ? dq + rows * e : nullptr;
  const dim3 grid(static_cast<unsigned>(a.batch), static_cast<unsigned>(CeilDiv(a.s, kBwdKeys)), 1);
  Dispatch(a.type, a.e, a.causal, [&](auto t, auto d, auto c) {
    using T = typename decltype(t)::type;
    constexpr int kD = decltype(d)::value;
    const auto gout = OperandOf<const T>(a.gout);
    if (rows > 0) {
      Launch("AttentionBackwardTensorCores (D)", RowDotKernel<T, kD>, dim3(BlocksFor(rows, 8)), 256,
             0, stream, gout, OperandOf<const T>(a.out), dvec, rows, dm);
    }
    Launch("AttentionBackwardTensorCores (gk, gv, dq)", BackwardKernel<T, kD, decltype(c)::value>,
           grid, kBwdWarps * 32, BwdLayout<kD>::kBytes, stream, OperandOf<const T>(a.q),
           OperandOf<const T>(a.k), OperandOf<const T>(a.v), gout, static_cast<const float*>(a.lse),
           static_cast<const float*>(dvec), dq, OperandOf<T>(a.gk), OperandOf<T>(a.gv), dm);
    if (rows > 0) {
      Launch("AttentionBackwardTensorCores (gq)", ScaleConvertKernel<T, kD>,
             dim3(BlocksFor(rows, 8)), 256, 0, stream, static_cast<const float*>(dq),
             OperandOf<T>(a.gq), rows, dm);
    }
  });
  if (dq != nullptr) TY_CUDA_CHECK(cudaFreeAsync(dq, stream));
  return true;
}

}  // namespace trainyard::kernels::cuda
