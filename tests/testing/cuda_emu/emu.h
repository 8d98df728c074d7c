// CUDA on the host, for tests where no GPU exists: the kernel files of libtrainyard_cuda.so
// (kernels/cuda/*.cu), rewritten by translate.py for the host compiler, run their launches here.
// Each block runs alone; each of its threads is a fiber, which runs until it reaches a barrier
// (__syncthreads, __syncwarp, a shuffle or vote) or returns. A barrier lets its threads go on
// once every live thread it waits for has arrived, and a pass over the ready fibers goes in the
// opposite order after each, so a thread that reads what another has not yet written, for want
// of a barrier, reads it stale in one order or the other. A barrier that can never complete (a
// __syncthreads some threads skip) aborts naming the kernel and the block.
//
// What is modelled: the thread hierarchy and its builtins, static and dynamic shared memory,
// __syncthreads, __syncwarp, shuffles and __any_sync, atomics (trivially, one fiber at a time),
// WMMA fragments (nvcuda::wmma, include/mma.h: every lane holds the whole tile, and a store
// writes only a 32nd of it per lane, so a read of another lane's store without __syncwarp reads
// stale data), cp.async (include/cuda_pipeline.h: the copy happens at once), the launch limits
// of a compute capability 9.0 device (threads per block, grid dimensions, 227 KiB of shared
// memory), shared memory (static and dynamic) that reads as NaN bytes until the block writes
// it, and the alignment of vector accesses (tests/CMakeLists.txt builds the files with UBSan's
// alignment check; the emulated cp.async checks its own). A launch runs on its stream's host
// thread, in stream order and after the launch returns (runtime_emu.h), so work the host or
// another stream does not wait for may not have happened yet. Not modelled: concurrent blocks
// or kernels, memory models weaker than sequential, and timing.
//
// TY_CUDA_EMU_TRACE set in the environment prints every launch with its configuration.
//
// Force-included (-include) ahead of every translated file, and by include/cuda_runtime.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// The execution-space keywords mean nothing on the host; shared memory is static storage of the
// launching thread, which the blocks of a launch, run one at a time, take in turn (and which
// launches from other host threads, such as the ranks of a test, do not share).
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __launch_bounds__(...)
#define __grid_constant__

// The running fiber's coordinates (set by the scheduler before it resumes a fiber).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace ty_emu {

struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
};
inline LaunchConfig Config(dim3 grid, dim3 block, size_t shared_bytes = 0,
                           cudaStream_t stream = nullptr) {
  return {grid, block, shared_bytes, stream};
}

// Runs body once per thread of every block of the launch, on the calling OS thread. Aborts on a
// configuration a device would refuse.
void Run(const char* kernel, const LaunchConfig& config, const std::function<void()>& body);
// Queues the launch on its stream (runtime_emu.h): it runs in stream order on the stream's
// thread, after Launch returns; on a synchronous handle (the legacy default stream), before.
void Launch(const char* kernel, const LaunchConfig& config, std::function<void()> body);

void* DynamicShared();  // the running block's dynamic shared memory
// A static __shared__ variable at p of n bytes (translate.py adds the call after each): the
// first thread of a block to declare it fills it with 0xff bytes, which read as NaN.
void FreshShared(void* p, size_t n);
void SyncThreads();
void SyncWarp(unsigned mask);
// The warp's exchange: this lane offers n bytes (n <= 16) of value and receives every lane's
// offer in all (32 * n bytes), once the lanes of mask have all offered theirs.
void Gather(unsigned mask, const void* value, size_t n, void* all);
int Lane();

template <typename T>
T Shuffle(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>, "shuffle of a small value");
  T all[32];
  Gather(mask, &v, sizeof(T), all);
  return all[src];
}

template <typename To, typename From>
To BitCast(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &v, sizeof(To));
  return out;
}

// Element i of f32, bf16 or f16 storage as f32, and back (rounding to nearest): for the host
// stand-ins of cuBLASLt and cuDNN, which name the three types by their own enums.
enum class Storage { kF32, kBF16, kF16 };
inline float LoadElement(Storage s, const void* p, int64_t i) {
  switch (s) {
    case Storage::kF32:
      return static_cast<const float*>(p)[i];
    case Storage::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return __half2float(static_cast<const __half*>(p)[i]);
  }
}
inline void StoreElement(Storage s, void* p, int64_t i, float v) {
  switch (s) {
    case Storage::kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case Storage::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
  }
}

}  // namespace ty_emu

inline void __syncthreads() { ty_emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ty_emu::SyncWarp(mask); }
inline void __threadfence() {}
inline void __threadfence_system() {}

// width is 32 throughout the kernels; other widths abort.
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  if (width != 32) std::abort();
  return ty_emu::Shuffle(mask, v, src & 31);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  if (width != 32) std::abort();
  return ty_emu::Shuffle(mask, v, (ty_emu::Lane() ^ lane_mask) & 31);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  if (width != 32) std::abort();
  const int src = ty_emu::Lane() + static_cast<int>(delta);
  return ty_emu::Shuffle(mask, v, src < 32 ? src : ty_emu::Lane());
}
inline int __any_sync(unsigned mask, int predicate) {
  int all[32];
  ty_emu::Gather(mask, &predicate, sizeof(int), all);
  for (int lane = 0; lane < 32; ++lane) {
    if (((mask >> lane) & 1u) && all[lane] != 0) return 1;
  }
  return 0;
}

// One fiber runs at a time: atomics are plain updates.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// Rounded arithmetic and conversions: the host's IEEE operations round to nearest.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __int_as_float(int a) { return ty_emu::BitCast<float>(a); }
inline unsigned __float_as_uint(float a) { return ty_emu::BitCast<unsigned>(a); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}

// The device's integer and floating min and max overloads.
#define TY_EMU_MIN_MAX(T)                          \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
TY_EMU_MIN_MAX(int)
TY_EMU_MIN_MAX(unsigned)
TY_EMU_MIN_MAX(long)
TY_EMU_MIN_MAX(unsigned long)
TY_EMU_MIN_MAX(long long)
TY_EMU_MIN_MAX(unsigned long long)
#undef TY_EMU_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
