// The CUDA backend's interface: what the engine asks of libtrainyard_cuda.so.
//
// The library is loaded at run time (worker/tensor/cuda_backend.h) when a job asks for a CUDA
// device, so CPU binaries and tests never load cuBLAS or the CUDA runtime. This header includes
// no CUDA headers: streams and events are opaque pointers (cudaStream_t, cudaEvent_t).
//
// Contract (Note [The CUDA backend contract]):
// - Kernels mirror kernels/cpu one for one: same enums (UnaryOp, BinaryOp, CompareOp), same
//   StridedIter, same layouts and formulas. The CPU kernel is the specification; the CUDA one
//   must match it within the dtype's tolerance (tests/worker/cuda/cuda_parity_test.cc).
// - Pointers are device pointers on the device current for the calling thread (SetDevice),
//   except where a comment says host. Every kernel is asynchronous on `stream`.
// - Dtypes: kernels compute in f32 for f32, bf16 and f16 storage (bf16/f16 are converted on
//   load and rounded on store), and in f64 for f64 where a kernel says so. Integer dtypes only
//   where a kernel says so (Copy, Fill, Compare, the index arrays).
// - What can fail in production (no device, out of memory) returns Status; a launch error or
//   an unsupported dtype is a bug and aborts with the kernel's name and CUDA's message.
// Both sides are built from the same sources with the same compiler (the library links the
// engine's common code); TyCudaBackend checks kCudaAbiVersion and the interface's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/indexing.h"
#include "kernels/cpu/iter.h"
#include "kernels/cpu/pool.h"

namespace trainyard::kernels::cuda {

using cpu::BinaryOp;
using cpu::CompareOp;
using cpu::IndexCheck;
using cpu::Pool2dShape;
using cpu::StridedIter;
using cpu::UnaryOp;

// Element types. The numbers match trainyard::DType (worker/tensor/dtype.h checks it).
enum class ScalarType : uint8_t { kF32, kF64, kBF16, kF16, kI64, kI32, kU8, kBool };

using Stream = void*;  // cudaStream_t
using Event = void*;   // cudaEvent_t

struct DeviceProperties {
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  int64_t total_memory = 0;  // bytes
  int multiprocessors = 0;
};

// Matmul epilogue, fused by cuBLASLt: out = act(alpha * op(A) op(B) + beta * C + bias).
struct GemmEpilogue {
  const void* bias = nullptr;  // n entries of the output dtype, added to every row; or null
  bool gelu = false;           // tanh GELU after the bias
  void* gelu_input = nullptr;  // when gelu: receives the pre-activation (m x n, ld n) for backward
};

// Row-major batched GEMM: for b in [0, batch): C_b = alpha * op(A_b) op(B_b) + beta * C_b with
// A_b = a + b * stride_a, etc. (strides in elements; 0 broadcasts). op(A) is m x k. lda, ldb and
// ldc are row strides (A is stored k x m when trans_a), as in kernels/cpu/gemm.h. A and B are
// `in` (f32, bf16 or f16); C is `out` (the same, or f32 for bf16/f16 inputs). f32 inputs use
// TF32 tensor cores when allow_tf32, bf16/f16 use tensor cores with f32 accumulation.
struct GemmArgs {
  ScalarType in = ScalarType::kF32;
  ScalarType out = ScalarType::kF32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  bool allow_tf32 = true;
  GemmEpilogue epilogue;
};

// An operand of the fused attention: AttentionArgs::batch items of (rows, e) elements of the
// call's type, at any strides with a unit one along e. Item i's row r starts at element
// (i / heads) * outer + (i % heads) * inner + r * row of `data` (heads: AttentionArgs). A
// contiguous (batch, rows, e) array is {data, rows * e, 0, e} with heads 1; the (B, H, T, E)
// heads of a (B, T, H, E) array, as a model's q, k and v are, {data, T * H * E, E, H * E}.
// `data` is only read for inputs.
struct AttentionTensor {
  void* data = nullptr;
  int64_t outer = 0, inner = 0, row = 0;
};

// One fused attention call (Backend::AttentionForward and AttentionBackward): q (batch, l, e),
// k and v (batch, s, e), out (batch, l, e); lse (batch, l) f32, contiguous. The forward writes
// out and lse; the backward reads those and gout (batch, l, e) and writes gq, gk and gv.
struct AttentionArgs {
  ScalarType type = ScalarType::kF32;
  int64_t batch = 0, heads = 1, l = 0, s = 0, e = 0;
  bool causal = false;
  double scale = 1;
  AttentionTensor q, k, v, out;
  float* lse = nullptr;
  AttentionTensor gout, gq, gk, gv;  // backward only
};

// Where CheckIndices records a value it rejected: page-locked host memory (HostMalloc) that the
// device writes and the host reads once it has waited for the stream. check.op stays null
// until a fault; a fault recorded there is kept (the host clears the record).
struct IndexFault {
  IndexCheck check;
  int64_t value = 0;
};

// One tensor of a multi-tensor AdamW step: n elements of param (f32 master weights), grad (f32),
// exp_avg and exp_avg_sq (f32).
struct AdamTensor {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t n;
};

// 2-d convolution over NCHW arrays (contiguous), through cuDNN.
struct ConvDims {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t k = 1, r = 1, s = 1;         // output channels, kernel height and width
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  int64_t groups = 1;
  int64_t out_h = 1, out_w = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- Runtime ----
  virtual int DeviceCount() = 0;  // 0 when there is no usable device (never an error)
  virtual Status Properties(int device, DeviceProperties* out) = 0;
  // For the calling thread; cheap when it is current already (every op calls it).
  virtual Status SetDevice(int device) = 0;
  // Raw device memory (the caching allocator in worker/tensor sits on these).
  // ResourceExhausted with the sizes when the device is full.
  virtual Status Malloc(int device, size_t nbytes, void** out) = 0;
  virtual void Free(int device, void* ptr) = 0;
  // The engine's way to give its cached device memory back (its caching allocator's
  // EmptyCache for `device`): called when memory the library takes for itself (kernels'
  // scratch, the cuBLASLt and cuDNN workspaces) cannot be had, before trying once more.
  virtual void SetMemoryReleaser(void (*release)(int device)) = 0;
  // Page-locked host memory, for asynchronous copies; kernels may also address it directly
  // (unified addressing), as CheckIndices does.
  virtual Status HostMalloc(size_t nbytes, void** out) = 0;
  virtual void HostFree(void* ptr) = 0;
  // The device's compute stream: one non-blocking stream per device, where every op runs.
  virtual Stream ComputeStream(int device) = 0;
  virtual Stream CreateStream(int device) = 0;  // a new non-blocking stream, never destroyed
  // Copies nbytes between any host or device memory, asynchronously on `stream` (host memory
  // that is not page-locked makes it synchronous).
  virtual void Memcpy(void* dst, const void* src, size_t nbytes, Stream stream) = 0;
  virtual void StreamSynchronize(Stream stream) = 0;
  virtual Event CreateEvent(int device) = 0;  // timing disabled
  // An event that also records when the stream reached it, for EventSeconds.
  virtual Event CreateTimingEvent(int device) = 0;
  // The device time from `start` to `end` (timing events, both recorded and complete).
  virtual double EventSeconds(Event start, Event end) = 0;
  virtual void DestroyEvent(Event event) = 0;
  virtual void RecordEvent(Event event, Stream stream) = 0;
  virtual void StreamWaitEvent(Stream stream, Event event) = 0;
  virtual bool EventQuery(Event event) = 0;  // true when done
  virtual void EventSynchronize(Event event) = 0;

  // ---- Elementwise (kernels/cpu/elementwise.h, copy.h) ----
  // dst[i] = convert(src[i]); it: operand 0 = dst, 1 = src. Every dtype pair.
  virtual void Copy(const StridedIter& it, ScalarType dst_type, void* dst, ScalarType src_type,
                    const void* src, Stream stream) = 0;
  virtual void Fill(ScalarType type, int64_t n, void* out, double value, Stream stream) = 0;
  virtual void Unary(UnaryOp op, ScalarType type, const StridedIter& it, void* out, const void* x,
                     double alpha, double beta, Stream stream) = 0;
  virtual void UnaryBackward(UnaryOp op, ScalarType type, int64_t n, const void* x, const void* y,
                             const void* g, void* gx, double alpha, double beta, Stream stream) = 0;
  virtual void Binary(BinaryOp op, ScalarType type, const StridedIter& it, void* out, const void* x,
                      const void* y, double alpha, Stream stream) = 0;
  // Binary with inputs of two different types among f32, bf16 and f16 (their promotion, the
  // output's type, is f32): each input is converted to f32 on load, as a copy would convert it,
  // so a residual add of a 16-bit branch needs no f32 copy of it.
  virtual void BinaryMixed(BinaryOp op, ScalarType x_type, ScalarType y_type, const StridedIter& it,
                           float* out, const void* x, const void* y, double alpha,
                           Stream stream) = 0;
  virtual void Compare(CompareOp op, ScalarType type, const StridedIter& it, uint8_t* out,
                       const void* x, const void* y, Stream stream) = 0;
  virtual void Where(ScalarType type, const StridedIter& it, void* out, const uint8_t* cond,
                     const void* x, const void* y, Stream stream) = 0;

  // ---- Reductions over [outer, k, inner] (kernels/cpu/reduce.h) ----
  virtual void ReduceSum(ScalarType type, const void* x, void* out, int64_t outer, int64_t k,
                         int64_t inner, double scale, Stream stream) = 0;
  virtual void ReduceMaxMin(bool is_max, ScalarType type, const void* x, void* out, int64_t* idx,
                            int64_t outer, int64_t k, int64_t inner, Stream stream) = 0;
  // sum_i |x_i|^p (p = 0 means max_i |x_i|), f32 or bf16/f16 input, written as one double to
  // device memory `out` (so many norms can be summed without a sync).
  virtual void NormPow(ScalarType type, const void* x, int64_t n, double p, double* out,
                       Stream stream) = 0;

  // ---- Softmax, cross-entropy, layer norm (kernels/cpu/softmax.h, norm.h) ----
  virtual void SoftmaxForward(ScalarType type, const void* x, void* y, int64_t rows, int64_t n,
                              bool log, Stream stream) = 0;
  virtual void SoftmaxBackward(ScalarType type, const void* y, const void* gy, void* gx,
                               int64_t rows, int64_t n, bool log, Stream stream) = 0;
  // logits: (rows, c) of `type`, rows ld >= c apart; target int64; loss and lse f32.
  virtual void CrossEntropyForward(ScalarType type, const void* logits, int64_t ld,
                                   const int64_t* target, float* loss, float* lse, int64_t rows,
                                   int64_t c, int64_t ignore_index, double smoothing,
                                   Stream stream) = 0;
  // gloss f32 (one per row); grad has the logits' type and row stride ld.
  virtual void CrossEntropyBackward(ScalarType type, const void* logits, int64_t ld,
                                    const int64_t* target, const float* lse, const float* gloss,
                                    void* grad, int64_t rows, int64_t c, int64_t ignore_index,
                                    double smoothing, Stream stream) = 0;
  // x, y, gx: `type`; weight, bias, gweight, gbias: `param_type`; mean, rstd f32.
  virtual void LayerNormForward(ScalarType type, ScalarType param_type, const void* x,
                                const void* weight, const void* bias, void* y, float* mean,
                                float* rstd, int64_t rows, int64_t n, double eps,
                                Stream stream) = 0;
  virtual void LayerNormBackward(ScalarType type, ScalarType param_type, const void* x,
                                 const void* gy, const float* mean, const float* rstd,
                                 const void* weight, void* gx, void* gweight, void* gbias,
                                 int64_t rows, int64_t n, Stream stream) = 0;

  // ---- Indexing, random, optimizers ----
  // out[i, :] = x[index[i], :]; and its backward out[index[i], :] += src[i, :] (atomics: the
  // order of additions is not fixed; not bf16 or f16, whose sums would round at every add).
  virtual void IndexRows(ScalarType type, const void* x, int64_t row, const int64_t* index,
                         int64_t n, void* out, Stream stream) = 0;
  virtual void IndexAddRows(ScalarType type, void* out, int64_t row, const int64_t* index,
                            int64_t n, const void* src, Stream stream) = 0;
  // kernels/cpu/indexing.h CheckIndices without a host wait: out[i] = index[i] where `check`
  // accepts it, else the replacement that keeps the kernels given `out` in bounds; a rejected
  // value goes to `*fault` (see IndexFault) unless a fault is recorded there already.
  virtual void CheckIndices(const int64_t* index, int64_t n, const IndexCheck& check, int64_t* out,
                            IndexFault* fault, Stream stream) = 0;
  // Philox fills with the CPU's counter layout (kernels/cpu/random.h): equal draws on both.
  virtual void FillUniform(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset,
                           double lo, double hi, Stream stream) = 0;
  virtual void FillNormal(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset,
                          double mean, double std, Stream stream) = 0;
  virtual void FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset, double p_keep,
                             Stream stream) = 0;
  // One AdamW (or Adam) step over many tensors in one launch; formulas of
  // kernels/cpu/optim.h AdamUpdate. `tensors` is host memory with `count` entries. When
  // `found_inf` (device, f32) is not null and nonzero, the step is skipped on the device.
  virtual void AdamMulti(const AdamTensor* tensors, int count, int64_t step, double lr,
                         double beta1, double beta2, double eps, double weight_decay,
                         bool decoupled, const float* found_inf, Stream stream) = 0;
  // x *= scale for every tensor and found_inf (device f32, set to 1, never cleared) when any
  // value is inf or NaN: the loss scaler's unscale-and-check in one pass per tensor.
  // `tensors` and `sizes` are host memory with `count` entries (of device pointers).
  virtual void UnscaleCheck(float* const* tensors, const int64_t* sizes, int count, float scale,
                            float* found_inf, Stream stream) = 0;

  // ---- Pooling (kernels/cpu/pool.h; our kernels, same semantics) and batch norm
  // (kernels/cpu/norm.h: cuDNN where it takes the shape, else our kernels) ----
  virtual void MaxPool2dForward(ScalarType type, const Pool2dShape& s, const void* x, void* y,
                                int64_t* argmax, Stream stream) = 0;
  virtual void MaxPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy,
                                 const int64_t* argmax, void* gx, Stream stream) = 0;
  virtual void AvgPool2dForward(ScalarType type, const Pool2dShape& s, bool count_include_pad,
                                const void* x, void* y, Stream stream) = 0;
  virtual void AvgPool2dBackward(ScalarType type, const Pool2dShape& s, bool count_include_pad,
                                 const void* gy, void* gx, Stream stream) = 0;
  virtual void AdaptiveAvgPool2dForward(ScalarType type, const Pool2dShape& s, const void* x,
                                        void* y, Stream stream) = 0;
  virtual void AdaptiveAvgPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy,
                                         void* gx, Stream stream) = 0;
  // f32 only (the op layer keeps batch norm in f32 under autocast). weight, bias and the
  // running statistics (both or neither) may be null.
  virtual void BatchNormTrainingForward(const float* x, const float* weight, const float* bias,
                                        float* y, float* running_mean, float* running_var,
                                        double momentum, double eps, float* mean, float* invstd,
                                        int64_t outer, int64_t c, int64_t inner, Stream stream) = 0;
  virtual void BatchNormForward(const float* x, const float* mean, const float* invstd,
                                const float* weight, const float* bias, float* y, int64_t outer,
                                int64_t c, int64_t inner, Stream stream) = 0;
  // eps: the forward's (cuDNN asks for it; mean and invstd are what the forward saved).
  virtual void BatchNormBackward(const float* x, const float* gy, const float* mean,
                                 const float* invstd, const float* weight, float* gx,
                                 float* gweight, float* gbias, int64_t outer, int64_t c,
                                 int64_t inner, bool training, double eps, Stream stream) = 0;

  // ---- Fused attention (flash-attention style: tiles of keys through on-chip memory, online
  // softmax, nothing of size L x S written) ----
  // Operands where AttentionArgs says; lse receives each row's log-sum-exp of the scaled
  // scores for the backward. e is at most 128 (and AttentionFits). Causal masks key j > query i.
  virtual void AttentionForward(const AttentionArgs& args, Stream stream) = 0;
  // From gout: gq, gk, gv (overwritten), recomputing the probabilities from lse.
  virtual void AttentionBackward(const AttentionArgs& args, Stream stream) = 0;
  // Whether the fused kernels take head size e for `type` on `device`: e in [1, 128] and their
  // shared memory within the device's per-block limit (GPUs of compute capability 8.6 and 8.9
  // allow 99 KiB, less than the f32 kernels need at e > 64).
  virtual bool AttentionFits(int device, ScalarType type, int64_t e) = 0;

  // ---- cuBLASLt, cuDNN ----
  virtual void Gemm(const GemmArgs& args, Stream stream) = 0;
  // Convolutions (f32, bf16 or f16 NCHW; weight (k, c / groups, r, s)). beta 0 overwrites.
  virtual void ConvForward(ScalarType type, const ConvDims& d, const void* x, const void* w,
                           void* y, Stream stream) = 0;
  virtual void ConvBackwardData(ScalarType type, const ConvDims& d, const void* w, const void* gy,
                                void* gx, Stream stream) = 0;
  virtual void ConvBackwardFilter(ScalarType type, const ConvDims& d, const void* x, const void* gy,
                                  void* gw, Stream stream) = 0;
};

// ---- The entry point (Note [The CUDA backend contract]) ----
inline constexpr char kCudaLibraryName[] = "libtrainyard_cuda.so";
inline constexpr char kCudaLibraryEnv[] = "TRAINYARD_CUDA_LIB";
inline constexpr char kCudaEntryPoint[] = "TyCudaBackend";
// Bump when Backend or the structs above change.
inline constexpr int kCudaAbiVersion = 8;

// Returns the process-wide backend, or null with `error` set when the versions differ.
using CudaEntryFn = Backend* (*)(int abi_version, size_t backend_size, std::string* error);

}  // namespace trainyard::kernels::cuda

extern "C" trainyard::kernels::cuda::Backend* TyCudaBackend(int abi_version, size_t backend_size,
                                                            std::string* error);
