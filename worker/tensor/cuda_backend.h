// The engine's way in to the CUDA backend (kernels/cuda/backend.h, libtrainyard_cuda.so).
//
// The library is dlopen()ed on the first request for a CUDA device (common/shared_library.h:
// $TRAINYARD_CUDA_LIB, next to the binary, ../lib, the loader's path), never before, so CPU jobs
// and tests never load the CUDA runtime, cuBLAS or cuDNN. The result, success or failure, is
// kept for the life of the process.
//
// Streams: every op on a CUDA tensor runs on its device's compute stream (ComputeStream), so
// ops are ordered among themselves without synchronisation; the host waits only where it reads
// device memory (item(), ToVector(), a copy to the CPU).
#pragma once

#include <chrono>
#include <vector>

#include "kernels/cuda/backend.h"
#include "worker/tensor/device.h"
#include "worker/tensor/device_allocator.h"
#include "worker/tensor/dtype.h"

namespace trainyard {

namespace cuda = kernels::cuda;

// The backend, loading the library on first use. FailedPrecondition or Unimplemented saying
// why when it cannot be loaded (not built, CUDA libraries missing, another build).
StatusOr<cuda::Backend*> LoadCudaBackend();

// Whether this machine has an NVIDIA driver (/proc/driver/nvidia/gpus or /dev/nvidia0), found
// without loading anything: where it has none, LoadCudaBackend can find no device, so callers
// that only look for GPUs (worker discovery, the GPU tests) need not pay for loading CUDA.
bool NvidiaDriverPresent();

// The loaded backend, for code that holds a CUDA tensor (so it is loaded). TY_CHECKs.
cuda::Backend& CudaBackend();

// The caching allocator of cuda:`device` (a valid device of the loaded backend).
DeviceCachingAllocator& CudaAllocator(int device);

// The compute stream of `device`, which it makes the calling thread's current device.
cuda::Stream ComputeStream(Device device);

// Waits until every op queued on the compute stream of `device` has finished, then fails with
// the op, dim and value when an index check on the device rejected a value meanwhile (Note
// [Deferred index checks] in device_kernels_nn.cc). Every host wait for the compute stream goes
// through here.
void SynchronizeDevice(Device device);

// Where index checks on `device` record a value they reject: page-locked host memory that
// kernels write (kernels/cuda/backend.h IndexFault), created on first use.
cuda::IndexFault* IndexFaultRecord(Device device);

cuda::ScalarType ToScalarType(DType dtype);

// Time between points of a device's compute stream, so that phase timings mean the same on a
// GPU, where ops only queue work, as on the CPU, where they run it. Mark() notes the point the
// stream has reached (a timing event on CUDA; the host clock on the CPU); Seconds(a, b) is the
// time from mark a to mark b, once the host has waited for the stream past b. Clear() forgets
// the marks and keeps the events for the next ones.
class StreamTimer {
 public:
  explicit StreamTimer(Device device) : device_(device) {}
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  int Mark();
  double Seconds(int from, int to) const;
  void Clear() { marks_ = 0; }

 private:
  Device device_;
  int marks_ = 0;
  std::vector<cuda::Event> events_;                           // CUDA
  std::vector<std::chrono::steady_clock::time_point> times_;  // CPU
};

// Tests only: use `backend` (a fake over host memory, say) instead of loading the library, or
// go back to loading it with nullptr. Not thread-safe against running ops.
void SetCudaBackendForTesting(cuda::Backend* backend);

}  // namespace trainyard
