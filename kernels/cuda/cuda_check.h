// Host helpers shared by the files of libtrainyard_cuda.so: CUDA error checks, launch sizes and
// scratch memory. Device helpers are in convert.cuh and device_math.cuh. Include only from the
// library's own sources.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/check.h"
#include "kernels/cuda/backend.h"

// A CUDA call that must succeed (a failure is a bug or a lost device): aborts naming the call.
#define TY_CUDA_CHECK(expr)                                                 \
  do {                                                                      \
    const cudaError_t ty_cuda_err_ = (expr);                                \
    TY_CHECK(ty_cuda_err_ == cudaSuccess)                                   \
        << #expr << " failed: " << cudaGetErrorString(ty_cuda_err_) << " (" \
        << static_cast<int>(ty_cuda_err_) << ")";                           \
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

// Makes `device` current for the calling thread and restores the previous one on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TY_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) TY_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (device_ != previous_) TY_CUDA_CHECK(cudaSetDevice(previous_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

// Device memory the library takes for itself, outside the engine's caching allocator: kernels'
// scratch (stream-ordered, from the device's default pool) and the libraries' workspaces. When
// the device is full, the engine's cache is given back (Backend::SetMemoryReleaser), the pool
// trimmed, and the allocation tried once more; then the abort names `what` and the sizes.
// On the calling thread's current device.
void* AllocOrDie(const char* what, size_t bytes, cudaStream_t stream);  // cudaMallocAsync
void* AllocOrDie(const char* what, size_t bytes);                       // cudaMalloc

// count elements of T of stream-ordered scratch on `stream`; the caller frees it with
// cudaFreeAsync on the same stream.
template <typename T>
T* Scratch(const char* name, int64_t count, cudaStream_t stream) {
  return static_cast<T*>(AllocOrDie(name, static_cast<size_t>(count) * sizeof(T), stream));
}

}  // namespace trainyard::kernels::cuda
