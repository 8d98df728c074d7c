// CudaBackendImpl's runtime half: devices, memory, streams, events, and the library's entry
// point TyCudaBackend (kernels/cuda/backend.h).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/cuda_check.h"

namespace trainyard::kernels::cuda {
namespace {

std::string MiB(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// One compute stream per device, created on first use.
class Streams {
 public:
  cudaStream_t Get(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(streams_.size()) <= device) streams_.resize(device + 1, nullptr);
    if (streams_[device] == nullptr) streams_[device] = Create(device);
    return streams_[device];
  }
  static cudaStream_t Create(int device) {
    DeviceGuard guard(device);
    cudaStream_t s = nullptr;
    TY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Kernels' scratch (cudaMallocAsync) comes from the default pool: keep what it has mapped
    // across synchronisations instead of unmapping it at every sync (threshold 0). When the
    // device is full, ReleaseMemory trims it.
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    return s;
  }

 private:
  std::mutex mu_;
  std::vector<cudaStream_t> streams_;
};

Streams& ComputeStreams() {
  static Streams* s = new Streams();  // never destroyed: streams outlive static destructors
  return *s;
}

std::atomic<void (*)(int)> g_releaser{nullptr};

// Gives memory back to `device` (current on this thread): the engine's cached blocks when
// `engine_cache`, then whatever the default pool holds unused once the device is idle.
void ReleaseMemory(int device, bool engine_cache) {
  (void)cudaGetLastError();  // clears the failed allocation's error
  if (void (*release)(int) = g_releaser.load(); engine_cache && release != nullptr) {
    release(device);
  }
  TY_CUDA_CHECK(cudaDeviceSynchronize());
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    TY_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  }
}

// "(F MiB free of T MiB)" on the current device.
std::string FreeOfTotal() {
  size_t free_bytes = 0, total = 0;
  (void)cudaMemGetInfo(&free_bytes, &total);
  return "(" + MiB(free_bytes) + " free of " + MiB(total) + ")";
}

// alloc(), and once more after ReleaseMemory when the device is full; its last error.
template <typename F>
cudaError_t TryTwice(int device, bool engine_cache, const F& alloc) {
  cudaError_t e = alloc();
  if (e == cudaErrorMemoryAllocation) {
    ReleaseMemory(device, engine_cache);
    e = alloc();
  }
  if (e != cudaSuccess) (void)cudaGetLastError();  // out of memory is not sticky
  return e;
}

template <typename F>
void* AllocRetrying(const char* what, size_t bytes, const F& alloc) {
  int device = 0;
  TY_CUDA_CHECK(cudaGetDevice(&device));
  void* p = nullptr;
  const cudaError_t e = TryTwice(device, /*engine_cache=*/true, [&] { return alloc(&p); });
  TY_CHECK(e == cudaSuccess) << what << ": cannot allocate " << MiB(bytes) << " " << FreeOfTotal()
                             << " after emptying the caches: " << cudaGetErrorString(e);
  return p;
}

}  // namespace

void* AllocOrDie(const char* what, size_t bytes, cudaStream_t stream) {
  return AllocRetrying(what, bytes, [&](void** p) { return cudaMallocAsync(p, bytes, stream); });
}

void* AllocOrDie(const char* what, size_t bytes) {
  return AllocRetrying(what, bytes, [&](void** p) { return cudaMalloc(p, bytes); });
}

void CudaBackendImpl::SetMemoryReleaser(void (*release)(int device)) { g_releaser = release; }

int CudaBackendImpl::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not sticky, report none
    return 0;
  }
  return count;
}

Status CudaBackendImpl::Properties(int device, DeviceProperties* out) {
  cudaDeviceProp p{};
  const cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) {
    return FailedPreconditionError("cuda:" + std::to_string(device) +
                                   ": cannot read its properties: " + cudaGetErrorString(e));
  }
  out->name = p.name;
  out->major = p.major;
  out->minor = p.minor;
  out->total_memory = static_cast<int64_t>(p.totalGlobalMem);
  out->multiprocessors = p.multiProcessorCount;
  return OkStatus();
}

Status CudaBackendImpl::SetDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return OkStatus();  // cheap
  const cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) return OkStatus();
  (void)cudaGetLastError();
  return FailedPreconditionError("cuda:" + std::to_string(device) +
                                 " cannot be used: " + cudaGetErrorString(e) + " (" +
                                 std::to_string(DeviceCount()) + " devices visible)");
}

// The caching allocator empties its own cache and asks again; what the default pool keeps of
// the kernels' scratch is given back here first.
Status CudaBackendImpl::Malloc(int device, size_t nbytes, void** out) {
  DeviceGuard guard(device);
  const cudaError_t e =
      TryTwice(device, /*engine_cache=*/false, [&] { return cudaMalloc(out, nbytes); });
  if (e == cudaSuccess) return OkStatus();
  return ResourceExhaustedError("cuda:" + std::to_string(device) + ": cannot allocate " +
                                MiB(nbytes) + " " + FreeOfTotal() + ": " + cudaGetErrorString(e));
}

void CudaBackendImpl::Free(int device, void* ptr) {
  DeviceGuard guard(device);
  TY_CUDA_CHECK(cudaFree(ptr));
}

Status CudaBackendImpl::HostMalloc(size_t nbytes, void** out) {
  const cudaError_t e = cudaHostAlloc(out, nbytes, cudaHostAllocDefault);
  if (e == cudaSuccess) return OkStatus();
  (void)cudaGetLastError();
  return ResourceExhaustedError("cannot allocate " + MiB(nbytes) +
                                " of page-locked host memory: " + cudaGetErrorString(e));
}

void CudaBackendImpl::HostFree(void* ptr) { TY_CUDA_CHECK(cudaFreeHost(ptr)); }

Stream CudaBackendImpl::ComputeStream(int device) { return ComputeStreams().Get(device); }

Stream CudaBackendImpl::CreateStream(int device) { return Streams::Create(device); }

void CudaBackendImpl::Memcpy(void* dst, const void* src, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  TY_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, AsStream(stream)));
}

void CudaBackendImpl::StreamSynchronize(Stream stream) {
  TY_CUDA_CHECK(cudaStreamSynchronize(AsStream(stream)));
}

namespace {
Event NewEvent(int device, unsigned flags) {
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  TY_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  return e;
}
}  // namespace

Event CudaBackendImpl::CreateEvent(int device) { return NewEvent(device, cudaEventDisableTiming); }

Event CudaBackendImpl::CreateTimingEvent(int device) { return NewEvent(device, cudaEventDefault); }

double CudaBackendImpl::EventSeconds(Event start, Event end) {
  float ms = 0;
  TY_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms / 1000.0;
}

void CudaBackendImpl::DestroyEvent(Event event) {
  TY_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

void CudaBackendImpl::RecordEvent(Event event, Stream stream) {
  TY_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), AsStream(stream)));
}

void CudaBackendImpl::StreamWaitEvent(Stream stream, Event event) {
  TY_CUDA_CHECK(cudaStreamWaitEvent(AsStream(stream), static_cast<cudaEvent_t>(event), 0));
}

bool CudaBackendImpl::EventQuery(Event event) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) return false;
  TY_CUDA_CHECK(e);
  return true;
}

void CudaBackendImpl::EventSynchronize(Event event) {
  TY_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

}  // namespace trainyard::kernels::cuda

extern "C" trainyard::kernels::cuda::Backend* TyCudaBackend(int abi_version, size_t backend_size,
                                                            std::string* error) {
  using trainyard::kernels::cuda::Backend;
  if (abi_version != trainyard::kernels::cuda::kCudaAbiVersion || backend_size != sizeof(Backend)) {
    *error = "libtrainyard_cuda.so is from another build (interface version " +
             std::to_string(trainyard::kernels::cuda::kCudaAbiVersion) + ", asked for " +
             std::to_string(abi_version) + "); rebuild it with the engine";
    return nullptr;
  }
  static Backend* backend = new trainyard::kernels::cuda::CudaBackendImpl();
  return backend;
}
