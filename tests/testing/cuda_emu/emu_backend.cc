// The methods of CudaBackendImpl (kernels/cuda/backend_impl.h) that the real library defines in
// runtime.cc, for the emulated build (emu_backend.h). blas.cc and dnn.cc are the library's own,
// over cublaslt_emu.cc and cudnn_emu.cc (where the toolkit has no cudnn.h, the convolutions are
// HostBackend's and batch norm takes the library's own kernels).
#include "tests/testing/cuda_emu/emu_backend.h"

#include <cstdlib>

#include "common/check.h"
#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/cuda_check.h"
#include "tests/testing/cuda_emu/runtime_emu.h"
#include "tests/testing/host_backend.h"

namespace trainyard::kernels::cuda {
namespace {

testing::HostBackend& Host() {
  static auto* host = new testing::HostBackend({/*device_count=*/ty_emu::kDevices});
  return *host;
}

Status CheckDevice(int device) {
  if (device >= 0 && device < ty_emu::kDevices) return OkStatus();
  return InvalidArgumentError("cuda emulation: cuda:" + std::to_string(device) +
                              " is not a device; there are " + std::to_string(ty_emu::kDevices));
}

// Exactly `bytes` (at least 1), 256-byte aligned as cudaMalloc's: a kernel that reads or writes
// past the end of a buffer does so outside the allocation, where a memory checker (valgrind)
// sees it.
void* Allocate(size_t bytes) {
  void* p = nullptr;
  TY_CHECK(posix_memalign(&p, 256, bytes == 0 ? 1 : bytes) == 0)
      << "cuda emulation: out of host memory for " << bytes << " bytes";
  return p;
}

}  // namespace

void* AllocOrDie(const char*, size_t bytes, cudaStream_t) { return Allocate(bytes); }
void* AllocOrDie(const char*, size_t bytes) { return Allocate(bytes); }

int CudaBackendImpl::DeviceCount() { return ty_emu::kDevices; }

Status CudaBackendImpl::Properties(int device, DeviceProperties* out) {
  RETURN_IF_ERROR(CheckDevice(device));
  out->name = "CUDA emulated on the host (sm_90)";
  out->major = 9;
  out->minor = 0;
  out->total_memory = int64_t{1} << 34;
  out->multiprocessors = 132;
  return OkStatus();
}

Status CudaBackendImpl::SetDevice(int device) {
  RETURN_IF_ERROR(CheckDevice(device));
  cudaSetDevice(device);  // the library's code asks the runtime which device is current
  return Host().SetDevice(device);
}

Status CudaBackendImpl::Malloc(int device, size_t nbytes, void** out) {
  RETURN_IF_ERROR(CheckDevice(device));
  *out = Allocate(nbytes);
  return OkStatus();
}
void CudaBackendImpl::Free(int, void* ptr) { std::free(ptr); }
void CudaBackendImpl::SetMemoryReleaser(void (*)(int)) {}
Status CudaBackendImpl::HostMalloc(size_t nbytes, void** out) {
  *out = Allocate(nbytes);
  return OkStatus();
}
void CudaBackendImpl::HostFree(void* ptr) { std::free(ptr); }

Stream CudaBackendImpl::ComputeStream(int device) { return Host().ComputeStream(device); }
Stream CudaBackendImpl::CreateStream(int device) { return Host().CreateStream(device); }
void CudaBackendImpl::Memcpy(void* dst, const void* src, size_t nbytes, Stream stream) {
  Host().Memcpy(dst, src, nbytes, stream);
}
void CudaBackendImpl::StreamSynchronize(Stream stream) { Host().StreamSynchronize(stream); }
Event CudaBackendImpl::CreateEvent(int device) { return Host().CreateEvent(device); }
Event CudaBackendImpl::CreateTimingEvent(int device) { return Host().CreateTimingEvent(device); }
double CudaBackendImpl::EventSeconds(Event start, Event end) {
  return Host().EventSeconds(start, end);
}
void CudaBackendImpl::DestroyEvent(Event event) { Host().DestroyEvent(event); }
void CudaBackendImpl::RecordEvent(Event event, Stream stream) { Host().RecordEvent(event, stream); }
void CudaBackendImpl::StreamWaitEvent(Stream stream, Event event) {
  Host().StreamWaitEvent(stream, event);
}
bool CudaBackendImpl::EventQuery(Event event) { return Host().EventQuery(event); }
void CudaBackendImpl::EventSynchronize(Event event) { Host().EventSynchronize(event); }

#ifndef TY_EMU_CUDNN  // no cudnn.h: dnn.cc is not built, and these stand in for it
void CudaBackendImpl::ConvForward(ScalarType type, const ConvDims& d, const void* x, const void* w,
                                  void* y, Stream stream) {
  Host().ConvForward(type, d, x, w, y, stream);
}
void CudaBackendImpl::ConvBackwardData(ScalarType type, const ConvDims& d, const void* w,
                                       const void* gy, void* gx, Stream stream) {
  Host().ConvBackwardData(type, d, w, gy, gx, stream);
}
void CudaBackendImpl::ConvBackwardFilter(ScalarType type, const ConvDims& d, const void* x,
                                         const void* gy, void* gw, Stream stream) {
  Host().ConvBackwardFilter(type, d, x, gy, gw, stream);
}

void CudaBackendImpl::BatchNormTrainingForward(const float* x, const float* weight,
                                               const float* bias, float* y, float* running_mean,
                                               float* running_var, double momentum, double eps,
                                               float* mean, float* invstd, int64_t outer, int64_t c,
                                               int64_t inner, Stream stream) {
  OwnBatchNormTrainingForward(x, weight, bias, y, running_mean, running_var, momentum, eps, mean,
                              invstd, outer, c, inner, stream);
}
void CudaBackendImpl::BatchNormBackward(const float* x, const float* gy, const float* mean,
                                        const float* invstd, const float* weight, float* gx,
                                        float* gweight, float* gbias, int64_t outer, int64_t c,
                                        int64_t inner, bool training, double, Stream stream) {
  OwnBatchNormBackward(x, gy, mean, invstd, weight, gx, gweight, gbias, outer, c, inner, training,
                       stream);
}
#endif

}  // namespace trainyard::kernels::cuda

namespace trainyard::testing {

kernels::cuda::Backend* EmulatedCudaBackend() {
  static auto* backend = new kernels::cuda::CudaBackendImpl();
  return backend;
}

}  // namespace trainyard::testing
