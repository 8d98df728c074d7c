// The CUDA backend of the emulated build (emu_backend.h): the library's own files, runtime.cc,
// blas.cc and dnn.cc among them, over the emulated runtime (runtime_emu.cc), cuBLASLt
// (cublaslt_emu.cc) and cuDNN (cudnn_emu.cc). Where the toolkit has no cudnn.h, dnn.cc is not
// built: the convolutions are then HostBackend's, queued on the stream, and batch norm takes the
// library's own kernels.
#include "tests/testing/cuda_emu/emu_backend.h"

#include "kernels/cuda/backend_impl.h"
#include "tests/testing/cuda_emu/runtime_emu.h"
#ifndef TY_EMU_CUDNN
#include "tests/testing/host_backend.h"
#endif

namespace trainyard::kernels::cuda {
#ifndef TY_EMU_CUDNN
namespace {

testing::HostBackend& Host() {
  static auto* host = new testing::HostBackend({/*device_count=*/ty_emu::kDevices});
  return *host;
}

// HostBackend's convolution, in stream order (it runs at once on its own stream handles).
template <typename F>
void OnStream(Stream stream, F f) {
  static const Stream host_stream = Host().CreateStream(0);
  ty_emu::OnStream(AsStream(stream), [=] { f(host_stream); });
}

}  // namespace

void CudaBackendImpl::ConvForward(ScalarType type, const ConvDims& d, const void* x, const void* w,
                                  void* y, Stream stream) {
  OnStream(stream, [=](Stream s) { Host().ConvForward(type, d, x, w, y, s); });
}
void CudaBackendImpl::ConvBackwardData(ScalarType type, const ConvDims& d, const void* w,
                                       const void* gy, void* gx, Stream stream) {
  OnStream(stream, [=](Stream s) { Host().ConvBackwardData(type, d, w, gy, gx, s); });
}
void CudaBackendImpl::ConvBackwardFilter(ScalarType type, const ConvDims& d, const void* x,
                                         const void* gy, void* gw, Stream stream) {
  OnStream(stream, [=](Stream s) { Host().ConvBackwardFilter(type, d, x, gy, gw, s); });
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
