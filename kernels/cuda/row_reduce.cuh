// Rows reduced by a warp or a block, shared by the library's row kernels (reduce.cu,
// softmax.cu, norm.cu): warp shuffles of any 32-bit-word value, an all-reduce over a row's
// lanes in a fixed order (Note [Deterministic reductions] in reduce.cu), and the launch shape
// of rows of n elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace trainyard::kernels::cuda {

inline constexpr unsigned kFullWarp = 0xffffffffu;
inline constexpr int64_t kTargetBlocks = 1024;  // what a split reduction aims for

// Warp shuffles of any value made of 32-bit words.
template <typename A>
__device__ __forceinline__ A Shfl(A v, int arg, bool down) {
  static_assert(sizeof(A) % 4 == 0, "shuffled values are made of 32-bit words");
  int w[sizeof(A) / 4];
  memcpy(w, &v, sizeof(A));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(A) / 4); ++i)
    w[i] = down ? __shfl_down_sync(kFullWarp, w[i], arg) : __shfl_sync(kFullWarp, w[i], arg);
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
inline RowPlan PlanRows(int64_t rows, int64_t n) {
  const unsigned lanes = n <= 1024 ? 32 : (n <= 8192 ? 256 : 512);
  const unsigned per_block = lanes == 32 ? 8 : 1;
  TY_CHECK(CeilDiv(rows, per_block) < (int64_t{1} << 31)) << rows << " rows";
  return {dim3(static_cast<unsigned>(CeilDiv(rows, per_block))), dim3(lanes, per_block)};
}
// The row of this thread under a RowPlan.
__device__ __forceinline__ int64_t RowOf() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
}

}  // namespace trainyard::kernels::cuda
