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
  void Copy(const StridedIter& it, ScalarType dst_type, void* dst, ScalarType src_type,
            const void* src, Stream stream) override;
  void Fill(ScalarType type, int64_t n, void* out, double value, Stream stream) override;
  void Unary(UnaryOp op, ScalarType type, const StridedIter& it, void* out, const void* x,
             double alpha, double beta, Stream stream) override;
  void UnaryBackward(UnaryOp op, ScalarType type, int64_t n, const void* x, const void* y,
                     const void* g, void* gx, double alpha, double beta, Stream stream) override;
  void Binary(BinaryOp op, ScalarType type, const StridedIter& it, void* out, const void* x,
              const void* y, double alpha, Stream stream) override;
  void BinaryMixed(BinaryOp op, ScalarType x_type, ScalarType y_type, const StridedIter& it,
                   float* out, const void* x, const void* y, double alpha, Stream stream) override;
  void Compare(CompareOp op, ScalarType type, const StridedIter& it, uint8_t* out, const void* x,
               const void* y, Stream stream) override;
  void Where(ScalarType type, const StridedIter& it, void* out, const uint8_t* cond, const void* x,
             const void* y, Stream stream) override;
  void ReduceSum(ScalarType type, const void* x, void* out, int64_t outer, int64_t k, int64_t inner,
                 double scale, Stream stream) override;
  void ReduceMaxMin(bool is_max, ScalarType type, const void* x, void* out, int64_t* idx,
                    int64_t outer, int64_t k, int64_t inner, Stream stream) override;
  void NormPow(ScalarType type, const void* x, int64_t n, double p, double* out,
               Stream stream) override;
  void SoftmaxForward(ScalarType type, const void* x, void* y, int64_t rows, int64_t n, bool log,
                      Stream stream) override;
  void SoftmaxBackward(ScalarType type, const void* y, const void* gy, void* gx, int64_t rows,
                       int64_t n, bool log, Stream stream) override;
  void CrossEntropyForward(ScalarType type, const void* logits, int64_t ld, const int64_t* target,
                           float* loss, float* lse, int64_t rows, int64_t c, int64_t ignore_index,
                           double smoothing, Stream stream) override;
  void CrossEntropyBackward(ScalarType type, const void* logits, int64_t ld, const int64_t* target,
                            const float* lse, const float* gloss, void* grad, int64_t rows,
                            int64_t c, int64_t ignore_index, double smoothing,
                            Stream stream) override;
  void LayerNormForward(ScalarType type, ScalarType param_type, const void* x, const void* weight,
                        const void* bias, void* y, float* mean, float* rstd, int64_t rows,
                        int64_t n, double eps, Stream stream) override;
  void LayerNormBackward(ScalarType type, ScalarType param_type, const void* x, const void* gy,
                         const float* mean, const float* rstd, const void* weight, void* gx,
                         void* gweight, void* gbias, int64_t rows, int64_t n,
                         Stream stream) override;
  void IndexRows(ScalarType type, const void* x, int64_t row, const int64_t* index, int64_t n,
                 void* out, Stream stream) override;
  void IndexAddRows(ScalarType type, void* out, int64_t row, const int64_t* index, int64_t n,
                    const void* src, Stream stream) override;
  void CheckIndices(const int64_t* index, int64_t n, const IndexCheck& check, int64_t* out,
                    IndexFault* fault, Stream stream) override;
  void FillUniform(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset, double lo,
                   double hi, Stream stream) override;
  void FillNormal(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset,
                  double mean, double std, Stream stream) override;
  void FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset, double p_keep,
                     Stream stream) override;
  void AdamMulti(const AdamTensor* tensors, int count, int64_t step, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled,
                 const float* found_inf, Stream stream) override;
  void UnscaleCheck(float* const* tensors, const int64_t* sizes, int count, float scale,
                    float* found_inf, Stream stream) override;
  void MaxPool2dForward(ScalarType type, const Pool2dShape& s, const void* x, void* y,
                        int64_t* argmax, Stream stream) override;
  void MaxPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy,
                         const int64_t* argmax, void* gx, Stream stream) override;
  void AvgPool2dForward(ScalarType type, const Pool2dShape& s, bool count_include_pad,
                        const void* x, void* y, Stream stream) override;
  void AvgPool2dBackward(ScalarType type, const Pool2dShape& s, bool count_include_pad,
                         const void* gy, void* gx, Stream stream) override;
  void AdaptiveAvgPool2dForward(ScalarType type, const Pool2dShape& s, const void* x, void* y,
                                Stream stream) override;
  void AdaptiveAvgPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy, void* gx,
                                 Stream stream) override;
  void BatchNormTrainingForward(const float* x, const float* weight, const float* bias, float* y,
                                float* running_mean, float* running_var, double momentum,
                                double eps, float* mean, float* invstd, int64_t outer, int64_t c,
                                int64_t inner, Stream stream) override;
  void BatchNormForward(const float* x, const float* mean, const float* invstd, const float* weight,
                        const float* bias, float* y, int64_t outer, int64_t c, int64_t inner,
                        Stream stream) override;
  void BatchNormBackward(const float* x, const float* gy, const float* mean, const float* invstd,
                         const float* weight, float* gx, float* gweight, float* gbias,
                         int64_t outer, int64_t c, int64_t inner, bool training, double eps,
                         Stream stream) override;
  void AttentionForward(const AttentionArgs& args, Stream stream) override;
  void AttentionBackward(const AttentionArgs& args, Stream stream) override;
  bool AttentionFits(int device, ScalarType type, int64_t e) override;
  void Gemm(const GemmArgs& args, Stream stream) override;
  void ConvForward(ScalarType type, const ConvDims& d, const void* x, const void* w, void* y,
                   Stream stream) override;
  void ConvBackwardData(ScalarType type, const ConvDims& d, const void* w, const void* gy, void* gx,
                        Stream stream) override;
  void ConvBackwardFilter(ScalarType type, const ConvDims& d, const void* x, const void* gy,
                          void* gw, Stream stream) override;

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
