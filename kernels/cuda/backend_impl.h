// CudaBackendImpl: the Backend of libtrainyard_cuda.so (kernels/cuda/backend.h). Its methods
// are defined across the library's files, named as their CPU counterparts in kernels/cpu:
//   runtime.cc      devices, memory, streams, events, the entry point
//   elementwise.cu  Copy, Fill, Unary, UnaryBackward, Binary, BinaryMixed, Compare, Where
//   reduce.cu       ReduceSum, ReduceMaxMin, NormPow
//   softmax.cu      softmax and cross-entropy
//   norm.cu         layer norm, and batch norm's own kernels
//   indexing.cu     IndexRows, IndexAddRows, CheckIndices
//   random.cu       FillUniform, FillNormal, FillBernoulli
//   optim.cu        AdamMulti, UnscaleCheck
//   pool.cu         max, average and adaptive average pooling
//   attention.cu    fused attention (attention_tc.cu: its tensor-core kernels)
//   blas.cc         Gemm (cuBLASLt)
//   dnn.cc          convolutions and batch norm (cuDNN)
// Thread safety: every method may be called from any thread; per-device state (streams, the
// cuBLASLt and cuDNN handles and workspaces) is created once under a lock.
//
// Note [Bit-exact ports]
// Random fills reimplement Philox4x32-10 (kernels/cpu/philox.h) with the CPU's counter layout,
// so f32 uniform and Bernoulli draws equal the CPU's bit for bit (f64 uniform too); normal
// draws go through CUDA's double log/sin/cos and agree to rounding. AdamMulti rounds each
// operation as AdamUpdate<float> does (IEEE intrinsics, FMAs exactly where the CPU has them,
// subnormals kept: no flush to zero), so it is bit-exact. Pooling backward gathers (each input
// pixel sums the outputs whose windows hold it, in the CPU's order of additions) instead of
// scattering with atomics: deterministic, and bit-exact with the CPU for f32. Only
// IndexAddRows uses atomics (the order of additions is not fixed, as backend.h says).
#pragma once

#include "kernels/cuda/backend.h"

namespace trainyard::kernels::cuda {

class CudaBackendImpl final : public Backend {
 public:
  int DeviceCount() override;
  Status Properties(int device, DeviceProperties* out) override;
  Status SetDevice(int device) override;
  Status Malloc(int device, size_t nbytes, void** out) override;
  void Free(int device, void* ptr) override;
  void SetMemoryReleaser(void (*release)(int device)) override;
  Status HostMalloc(size_t nbytes, void** out) override;
  void HostFree(void* ptr) override;
  Stream ComputeStream(int device) override;
  Stream CreateStream(int device) override;
  void Memcpy(void* dst, const void* src, size_t nbytes, Stream stream) override;
  void StreamSynchronize(Stream stream) override;
  Event CreateEvent(int device) override;
  Event CreateTimingEvent(int device) override;
  double EventSeconds(Event start, Event end) override;
  void DestroyEvent(Event event) override;
  void RecordEvent(Event event, Stream stream) override;
  void StreamWaitEvent(Stream stream, Event event) override;
  bool EventQuery(Event event) override;
  void EventSynchronize(Event event) override;
  // Every kernel of backend_kernels.inc, in the file the map above names.
#define TY_CUDA_KERNEL(name, params) void name params override;
#include "kernels/cuda/backend_kernels.inc"
#undef TY_CUDA_KERNEL
  bool AttentionFits(int device, ScalarType type, int64_t e) override;

 private:
  // Batch norm through our kernels (norm.cu), for the shapes the cuDNN path (dnn.cc) leaves.
  void OwnBatchNormTrainingForward(const float* x, const float* weight, const float* bias, float* y,
                                   float* running_mean, float* running_var, double momentum,
                                   double eps, float* mean, float* invstd, int64_t outer, int64_t c,
                                   int64_t inner, Stream stream);
  void OwnBatchNormBackward(const float* x, const float* gy, const float* mean, const float* invstd,
                            const float* weight, float* gx, float* gweight, float* gbias,
                            int64_t outer, int64_t c, int64_t inner, bool training, Stream stream);
};

}  // namespace trainyard::kernels::cuda
