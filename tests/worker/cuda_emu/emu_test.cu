// The host CUDA emulation itself (tests/testing/cuda_emu/emu.h), on small kernels written here:
// the thread hierarchy, barriers, shuffles and WMMA tiles behave as on a device, and what a
// device leaves undefined (a read before a barrier, a barrier some threads skip, a launch a
// device refuses) shows up. Translated and compiled like the library's kernel files.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mma.h>

#include <cmath>
#include <vector>

namespace {

__global__ void WriteCoordinates(int* out) {
  const int block = blockIdx.x + gridDim.x * blockIdx.y;
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = block * 1000 + thread;
}

TEST(CudaEmuSelfTest, EveryThreadOfEveryBlockRunsOnceWithItsCoordinates) {
  std::vector<int> out(3 * 2 * 4 * 3 * 2, -1);
  WriteCoordinates<<<dim3(3, 2), dim3(4, 3, 2)>>>(out.data());
  for (int block = 0; block < 6; ++block) {
    for (int thread = 0; thread < 24; ++thread) {
      EXPECT_EQ(out[block * 24 + thread], block * 1000 + thread);
    }
  }
}

// Sums 256 values through shared memory, one partial per warp; `barrier` false leaves out the
// __syncthreads between the partials' writes and their reads.
__global__ void BlockSum(const float* x, float* out, bool barrier) {
  __shared__ float partial[8];
  float v = x[blockIdx.x * 256 + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  if (barrier) __syncthreads();
  float total = 0;
  for (int w = 0; w < 8; ++w) total += partial[w];
  out[blockIdx.x * 256 + threadIdx.x] = total;
}

TEST(CudaEmuSelfTest, SharedMemoryAndShufflesSumABlock) {
  std::vector<float> x(2 * 256), out(2 * 256);
  for (int i = 0; i < 512; ++i) x[i] = static_cast<float>(i % 256 + 1) * (i < 256 ? 1 : 2);
  BlockSum<<<2, 256>>>(x.data(), out.data(), true);
  for (int i = 0; i < 512; ++i) ASSERT_EQ(out[i], i < 256 ? 32896.0f : 65792.0f) << i;
}

// Without the barrier some thread reads a partial before its warp has written it, whichever
// end of the block the emulation starts from (blocks alternate).
TEST(CudaEmuSelfTest, AReadWithoutTheBarrierReadsStaleSharedMemory) {
  std::vector<float> x(2 * 256, 1.0f), out(2 * 256);
  for (int i = 256; i < 512; ++i) x[i] = 2.0f;  // block 1's partials differ from block 0's
  BlockSum<<<2, 256>>>(x.data(), out.data(), false);
  for (int block = 0; block < 2; ++block) {
    int wrong = 0;
    for (int i = 0; i < 256; ++i) wrong += out[block * 256 + i] != 256.0f * (block + 1);
    EXPECT_GT(wrong, 0) << "block " << block;
  }
}

__global__ void ReadShared(float* out) {
  __shared__ float s[4];
  if (threadIdx.x == 0) s[0] = 1.0f + blockIdx.x;
  __syncthreads();
  out[blockIdx.x * 4 + threadIdx.x] = s[threadIdx.x];
}

// Each block's static shared memory starts over as NaN bytes, not as what the block before it
// left there.
TEST(CudaEmuSelfTest, StaticSharedMemoryReadsAsNaNUntilABlockWritesIt) {
  std::vector<float> out(8, 0.0f);
  ReadShared<<<2, 4>>>(out.data());
  for (int block = 0; block < 2; ++block) {
    EXPECT_EQ(out[block * 4], 1.0f + block);
    for (int i = 1; i < 4; ++i) EXPECT_TRUE(std::isnan(out[block * 4 + i])) << block << ", " << i;
  }
}

__global__ void WarpOps(const int* x, int* down, int* any) {
  const int lane = threadIdx.x % 32;
  down[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 3);
  any[threadIdx.x] = __any_sync(0xffffffffu, x[threadIdx.x] == 7 && lane > 0);
}

TEST(CudaEmuSelfTest, ShuffleDownAndAnyWorkWithinEachWarp) {
  std::vector<int> x(64), down(64), any(64);
  for (int i = 0; i < 64; ++i) x[i] = 100 + i;
  x[40] = 7;  // lane 8 of warp 1
  WarpOps<<<1, 64>>>(x.data(), down.data(), any.data());
  for (int i = 0; i < 64; ++i) {
    const int lane = i % 32;
    EXPECT_EQ(down[i], lane + 3 < 32 ? x[i + 3] : x[i]) << i;  // out of the warp: own value
    EXPECT_EQ(any[i], i >= 32 ? 1 : 0) << i;
  }
}

__global__ void DivergentBarrier() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncwarp();
  }
}

TEST(CudaEmuSelfTest, ABarrierThatCannotCompleteAborts) {
  EXPECT_DEATH({ DivergentBarrier<<<1, 32>>>(); },
               "a barrier cannot complete in DivergentBarrier, block \\(0, 0, 0\\): 32 threads "
               "live, 16 at __syncthreads, 16 at a warp barrier");
}

__global__ void EarlyReturn(int* out) {
  __shared__ int flag;
  if (threadIdx.x >= 20) return;
  if (threadIdx.x == 0) flag = 42;
  __syncthreads();
  out[threadIdx.x] = flag;
}

TEST(CudaEmuSelfTest, AThreadThatReturnedNoLongerCountsAtABarrier) {
  std::vector<int> out(64, 0);
  EarlyReturn<<<1, 64>>>(out.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], i < 20 ? 42 : 0) << i;
}

TEST(CudaEmuSelfTest, ALaunchADeviceRefusesAborts) {
  std::vector<int> out(2048);
  EXPECT_DEATH({ WriteCoordinates<<<1, 2048>>>(out.data()); }, "bad block size");
  EXPECT_DEATH({ WriteCoordinates<<<dim3(1, 70000), 32>>>(out.data()); }, "bad grid size");
}

namespace wmma = nvcuda::wmma;

// c (16x16 f32, a tile per block) = a (16x16, row-major) b (16x16, col-major), staged in
// dynamic shared memory, which lane 0 then reads whole; `sync` false leaves out the __syncwarp
// before that read.
__global__ void TileProduct(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, bool sync) {
  extern __shared__ float staged[];
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(staged, fc, 16, wmma::mem_row_major);
  if (sync) __syncwarp();
  if (threadIdx.x == 0) {
    for (int i = 0; i < 256; ++i) c[blockIdx.x * 256 + i] = staged[i];
  }
}

TEST(CudaEmuSelfTest, WmmaTilesMultiplyAndAStoreNeedsASyncwarpBeforeOtherLanesRead) {
  std::vector<__nv_bfloat16> a(256), b(256);
  std::vector<float> want(256, 0.0f), c(512);
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2bfloat16(static_cast<float>(i % 7) - 3);
    b[i] = __float2bfloat16(static_cast<float>(i % 5) * 0.5f);
  }
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) {
      for (int k = 0; k < 16; ++k) {
        // b is col-major: element (k, col) at col * 16 + k.
        want[r * 16 + col] += __bfloat162float(a[r * 16 + k]) * __bfloat162float(b[col * 16 + k]);
      }
    }
  }
  auto tile = [&](int block) {
    return std::vector<float>(c.begin() + 256 * block, c.begin() + 256 * (block + 1));
  };
  TileProduct<<<2, 32, 256 * sizeof(float)>>>(a.data(), b.data(), c.data(), true);
  EXPECT_EQ(tile(0), want);
  EXPECT_EQ(tile(1), want);
  // The block whose lane 0 runs first reads the other lanes' parts unwritten (NaN).
  TileProduct<<<2, 32, 256 * sizeof(float)>>>(a.data(), b.data(), c.data(), false);
  EXPECT_TRUE(tile(0) != want || tile(1) != want);
}

}  // namespace
