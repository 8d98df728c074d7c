// Host helpers shared by the files of libtrainyard_cuda.so: CUDA error checks, launch sizes and
// scratch memory. Device helpers are in convert.cuh and device_math.cuh. Include only from the
// library's own sources.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/check.h"
#include "kernels/cuda/backend.h"

// A CUDA call that must succeed (a failure is a bug or a lost device): aborts naming the call.
#define TY_CUDA_CHECK(expr)                                                           \
  do {                                                                                \
    const cudaError_t ty_cuda_err_ = (expr);                                          \
    TY_CHECK(ty_cuda_err_ == cudaSuccess)                                             \
        << #expr << " failed: " << cudaGetErrorString(ty_cuda_err_) << " ("           \
        << static_cast<int>(ty_cuda_err_) << ")";                                     \
  } while (0)

namespace trainyard::kernels::cuda {

// After a kernel launch: a bad configuration is reported here, naming the kernel, not at the
// next synchronisation.
inline void CheckLaunch(const char* name) {
  const cudaError_t e = cudaGetLastError();
  TY_CHECK(e == cudaSuccess) << name << ": kernel launch failed: " << cudaGetErrorString(e);
}

inline cudaStream_t AsStream(Stream s) { return static_cast<cudaStream_t>(s); }

// Blocks for n elements at `threads` per block, capped so a grid-stride loop covers the rest.
inline unsigned BlocksFor(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// count elements of T of stream-ordered scratch (cudaMallocAsync on `stream`); the caller
// frees it with cudaFreeAsync on the same stream. Aborts naming `name` when the device is full.
template <typename T>
T* Scratch(const char* name, int64_t count, cudaStream_t stream) {
  T* p = nullptr;
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  const cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&p), bytes, stream);
  TY_CHECK(e == cudaSuccess) << name << ": cannot allocate " << bytes
                             << " bytes of scratch: " << cudaGetErrorString(e) << " ("
                             << static_cast<int>(e) << ")";
  return p;
}

}  // namespace trainyard::kernels::cuda
