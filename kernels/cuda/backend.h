// The CUDA backend's interface: what the engine asks of libtrainyard_cuda.so.
//
// The library is loaded at run time (worker/tensor/cuda_backend.h) when a job asks for a CUDA
// device, so CPU binaries and tests never load cuBLAS or the CUDA runtime. This header includes
// no CUDA headers: streams and events are opaque pointers (cudaStream_t, cudaEvent_t).
//
// Contract (Note [The CUDA backend contract]):
// - Kernels mirror kernels/cpu one for one: same enums (UnaryOp, BinaryOp, CompareOp), same
//   StridedIter, same layouts and formulas. The CPU kernel is the specification; the CUDA one
//   must match it within the dtype's tolerance (tests/worker/cuda/backend_parity_test.cc).
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

  // ---- Kernels: every entry of backend_kernels.inc, as `virtual void Name(parameters) = 0` ----
#define TY_CUDA_KERNEL(name, params) virtual void name params = 0;
#include "kernels/cuda/backend_kernels.inc"
#undef TY_CUDA_KERNEL

  // Whether the fused kernels take head size e for `type` on `device`: e in [1, 128] and their
  // shared memory within the device's per-block limit (GPUs of compute capability 8.6 and 8.9
  // allow 99 KiB, less than the f32 kernels need at e > 64).
  virtual bool AttentionFits(int device, ScalarType type, int64_t e) = 0;
};

// ---- The entry point (Note [The CUDA backend contract]) ----
inline constexpr char kCudaLibraryName[] = "libtrainyard_cuda.so";
inline constexpr char kCudaLibraryEnv[] = "TRAINYARD_CUDA_LIB";
inline constexpr char kCudaEntryPoint[] = "TyCudaBackend";
// Every kernel's name and parameters as text (backend_kernels.inc), for kCudaAbiVersion.
inline constexpr char kCudaKernelSignatures[] =
#define TY_CUDA_KERNEL(name, params) #name #params "\n"
#include "kernels/cuda/backend_kernels.inc"
#undef TY_CUDA_KERNEL
    "";
constexpr uint32_t CudaAbiHash(const char* s) {  // FNV-1a
  uint32_t h = 2166136261u;
  for (; *s != 0; ++s) h = (h ^ static_cast<uint8_t>(*s)) * 16777619u;
  return h;
}
// Bump kCudaAbiRevision when the runtime part of Backend or the structs above change. The
// kernels' signatures are hashed in, so adding or changing a kernel changes the version
// without a bump.
inline constexpr uint32_t kCudaAbiRevision = 9;
inline constexpr int kCudaAbiVersion =
    static_cast<int>((CudaAbiHash(kCudaKernelSignatures) ^ (kCudaAbiRevision * 2654435761u)) >> 1);

// Returns the process-wide backend, or null with `error` set when the versions differ.
using CudaEntryFn = Backend* (*)(int abi_version, size_t backend_size, std::string* error);

}  // namespace trainyard::kernels::cuda

extern "C" trainyard::kernels::cuda::Backend* TyCudaBackend(int abi_version, size_t backend_size,
                                                            std::string* error);
