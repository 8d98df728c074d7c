// HostBackend: a fake CUDA device over host memory, for unit tests of the engine's CUDA
// dispatch (worker/tensor/cuda_backend.h SetCudaBackendForTesting) on machines without a GPU.
//
// Every kernel runs synchronously through the CPU kernels of kernels/cpu (the specification);
// bf16 and f16 storage is converted to f32 temporaries, computed and rounded back, as the CUDA
// kernels compute in f32. Streams and events are dummy handles (every event is complete).
//
// Device pointers are host addresses plus kDeviceTag, which no host mapping uses: host code
// that reads or writes "device" memory directly (instead of through a kernel or a copy) faults
// here as it would on a GPU. Memcpy tells the two kinds apart by the tag.
//
// Thread-safe for the allocation bookkeeping; kernels are as thread-safe as the CPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/backend.h"

namespace trainyard::testing {

struct HostBackendOptions {
  int device_count = 1;
  // Malloc fails with ResourceExhausted once this many bytes are allocated on a device.
  size_t memory_limit = SIZE_MAX;
  // The largest head size AttentionFits accepts (a GPU's shared memory bounds the fused kernels').
  int64_t attention_max_head = 128;
};

class HostBackend final : public kernels::cuda::Backend {
 public:
  using Stream = kernels::cuda::Stream;
  using Event = kernels::cuda::Event;
  using ScalarType = kernels::cuda::ScalarType;
  using StridedIter = kernels::cuda::StridedIter;
  using UnaryOp = kernels::cuda::UnaryOp;
  using BinaryOp = kernels::cuda::BinaryOp;
  using CompareOp = kernels::cuda::CompareOp;
  using Pool2dShape = kernels::cuda::Pool2dShape;

  // Bit 54 of an address: outside the user address space of x86-64 and arm64 Linux processes.
  static constexpr uintptr_t kDeviceTag = uintptr_t{1} << 54;
  // The host address behind a device pointer (null and host pointers pass through).
  static void* Host(const void* p);

  explicit HostBackend(HostBackendOptions options = {});
  ~HostBackend() override;

  // Kernel launches by name ("Gemm", "AttentionForward", ...; "Gemm.bf16" and "Gemm.f16" count
  // the products on 16-bit inputs; "Memcpy.to_host" the copies from device to host memory and
  // "Sync" the stream and event synchronisations, where a real device makes the host wait), for
  // tests that check which path an op took.
  int64_t launches(const std::string& kernel) const;
  int64_t kernel_launches() const;  // of every kernel: Memcpy and Sync excluded
  size_t allocated_bytes(int device) const;

  // ---- Runtime ----
  int DeviceCount() override { return options_.device_count; }
  Status Properties(int device, kernels::cuda::DeviceProperties* out) override;
  Status SetDevice(int device) override;
  Status Malloc(int device, size_t nbytes, void** out) override;
  void Free(int device, void* ptr) override;
  // Scratch and workspaces of the real library are host memory here: nothing to release.
  void SetMemoryReleaser(void (*)(int)) override {}
  Status HostMalloc(size_t nbytes, void** out) override;
  void HostFree(void* ptr) override;
  Stream ComputeStream(int device) override;
  Stream CreateStream(int device) override;
  void Memcpy(void* dst, const void* src, size_t nbytes, Stream stream) override;
  void StreamSynchronize(Stream) override { Count("Sync"); }
  Event CreateEvent(int device) override;
  // Timing events keep the host time of their RecordEvent: every kernel here has finished by
  // then, so the span between two is the work's time, as on a device.
  Event CreateTimingEvent(int device) override;
  double EventSeconds(Event start, Event end) override;
  void DestroyEvent(Event event) override;
  void RecordEvent(Event event, Stream stream) override;
  void StreamWaitEvent(Stream, Event) override {}
  bool EventQuery(Event) override { return true; }
  void EventSynchronize(Event) override { Count("Sync"); }

  // ---- Elementwise, reductions, softmax, norms, indexing, random, optimizers
  // (host_backend.cc) ----
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
  void CheckIndices(const int64_t* index, int64_t n, const kernels::cuda::IndexCheck& check,
                    int64_t* out, kernels::cuda::IndexFault* fault, Stream stream) override;
  void FillUniform(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset, double lo,
                   double hi, Stream stream) override;
  void FillNormal(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset,
                  double mean, double std, Stream stream) override;
  void FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset, double p_keep,
                     Stream stream) override;
  void AdamMulti(const kernels::cuda::AdamTensor* tensors, int count, int64_t step, double lr,
                 double beta1, double beta2, double eps, double weight_decay, bool decoupled,
                 const float* found_inf, Stream stream) override;
  void UnscaleCheck(float* const* tensors, const int64_t* sizes, int count, float scale,
                    float* found_inf, Stream stream) override;

  // ---- Pooling, batch norm, attention, GEMM, convolution (host_backend_nn.cc) ----
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
  void AttentionForward(const kernels::cuda::AttentionArgs& args, Stream stream) override;
  void AttentionBackward(const kernels::cuda::AttentionArgs& args, Stream stream) override;
  bool AttentionFits(int device, ScalarType type, int64_t e) override;
  void Gemm(const kernels::cuda::GemmArgs& args, Stream stream) override;
  void ConvForward(ScalarType type, const kernels::cuda::ConvDims& d, const void* x, const void* w,
                   void* y, Stream stream) override;
  void ConvBackwardData(ScalarType type, const kernels::cuda::ConvDims& d, const void* w,
                        const void* gy, void* gx, Stream stream) override;
  void ConvBackwardFilter(ScalarType type, const kernels::cuda::ConvDims& d, const void* x,
                          const void* gy, void* gw, Stream stream) override;

 private:
  void Count(const char* kernel);
  void CheckDevice(int device) const;
  void CheckStream(Stream stream) const;

  const HostBackendOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> launches_;
  std::vector<size_t> allocated_;                   // per device
  std::map<void*, std::pair<int, size_t>> blocks_;  // host address -> (device, bytes)
  std::vector<char> stream_handles_;                // ComputeStream(d) is &stream_handles_[d]
  std::vector<std::vector<char>*> extra_streams_;
};

}  // namespace trainyard::testing
