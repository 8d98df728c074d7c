// CudaBackendImpl's convolutions and training batch norm through cuDNN's legacy API.
// Convolutions: forward, backward data and backward filter over contiguous NCHW arrays
// (backend.h ConvDims; semantics of kernels/cpu/conv.h: cross-correlation, weight
// (k, c / groups, r, s)). Outputs are overwritten (beta = 0); a batch whose x or y exceeds
// INT_MAX elements runs in parts (ForEachBatchPart). Batch norm: Note [cuDNN batch norm].
//
// Note [cuDNN state]
// Per device: one handle, one workspace per stream (grown as needed; two streams must not
// share scratch memory) and a plan cache keyed by (direction, dtype, every ConvDims field).
// A plan holds the descriptors and the algorithm from cudnnGet*Algorithm_v7 (its first
// result that succeeds within kMaxWorkspaceBytes, with that result's math type). cuDNN
// handles must not be used by two threads at once, so everything, from the cache lookup to
// enqueueing the convolution, runs under the device's mutex; the calls only enqueue work.
//
// The legacy convolution and batch norm API is marked deprecated in cuDNN 9 (a warning only when
// CUDNN_WARN_DEPRECATED is defined); it is still supported, and this file silences the
// warning so a build that defines it still passes -Werror.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/cuda_check.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define TY_CUDNN_CHECK(expr)                                                 \
  do {                                                                       \
    const cudnnStatus_t ty_cudnn_st_ = (expr);                               \
    TY_CHECK(ty_cudnn_st_ == CUDNN_STATUS_SUCCESS)                           \
        << #expr << " failed: " << cudnnGetErrorString(ty_cudnn_st_) << " (" \
        << static_cast<int>(ty_cudnn_st_) << ")";                            \
  } while (0)

namespace trainyard::kernels::cuda {
namespace {

constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;  // larger algorithms are passed over

enum class Direction { kForward, kBackwardData, kBackwardFilter };

cudnnDataType_t DnnType(ScalarType t) {
  switch (t) {
    case ScalarType::kF32:
      return CUDNN_DATA_FLOAT;
    case ScalarType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    case ScalarType::kF16:
      return CUDNN_DATA_HALF;
    default:
      TY_CHECK(false) << "conv: dtype " << static_cast<int>(t)
                      << " is not supported on CUDA (use float32, bfloat16 or float16)";
  }
  return CUDNN_DATA_FLOAT;
}

std::string Describe(const ConvDims& d) {
  std::ostringstream os;
  os << "conv x=(" << d.n << "," << d.c << "," << d.h << "," << d.w << ") w=(" << d.k << ","
     << (d.groups > 0 ? d.c / d.groups : 0) << "," << d.r << "," << d.s << ") y=(" << d.n << ","
     << d.k << "," << d.out_h << "," << d.out_w << ") stride=" << d.stride_h << "x" << d.stride_w
     << " pad=" << d.pad_h << "x" << d.pad_w << " dilation=" << d.dil_h << "x" << d.dil_w
     << " groups=" << d.groups;
  return os.str();
}

int AsInt(int64_t v, const ConvDims& d) {
  TY_CHECK(v >= 0 && v <= INT_MAX)
      << "conv: size " << v << " does not fit cuDNN's int: " << Describe(d);
  return static_cast<int>(v);
}

void CheckDims(const ConvDims& d) {
  TY_CHECK(d.n >= 0 && d.c >= 1 && d.h >= 1 && d.w >= 1 && d.k >= 1 && d.r >= 1 && d.s >= 1 &&
           d.stride_h >= 1 && d.stride_w >= 1 && d.pad_h >= 0 && d.pad_w >= 0 && d.dil_h >= 1 &&
           d.dil_w >= 1 && d.out_h >= 1 && d.out_w >= 1)
      << "conv: bad sizes: " << Describe(d);
  TY_CHECK(d.groups >= 1 && d.c % d.groups == 0 && d.k % d.groups == 0)
      << "conv: groups must divide both channel counts: " << Describe(d);
}

// Descriptors and the algorithm of one (direction, dtype, ConvDims); read-only once built.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t workspace_bytes = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// x (n, c, h, w), w (k, c / groups, r, s), y (n, k, out_h, out_w); checks cuDNN's output size
// against d's.
std::unique_ptr<Plan> MakeDescriptors(ScalarType type, const ConvDims& d) {
  auto p = std::make_unique<Plan>();
  const cudnnDataType_t t = DnnType(type);
  TY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  TY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  TY_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  TY_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  TY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, t, AsInt(d.n, d),
                                            AsInt(d.c, d), AsInt(d.h, d), AsInt(d.w, d)));
  TY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, t, AsInt(d.n, d),
                                            AsInt(d.k, d), AsInt(d.out_h, d), AsInt(d.out_w, d)));
  TY_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, t, CUDNN_TENSOR_NCHW, AsInt(d.k, d),
                                            AsInt(d.c / d.groups, d), AsInt(d.r, d),
                                            AsInt(d.s, d)));
  // f32, bf16 and f16 all accumulate in f32.
  TY_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      p->conv, AsInt(d.pad_h, d), AsInt(d.pad_w, d), AsInt(d.stride_h, d), AsInt(d.stride_w, d),
      AsInt(d.dil_h, d), AsInt(d.dil_w, d), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TY_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, AsInt(d.groups, d)));
  // Tensor cores for bf16/f16; DEFAULT lets f32 use TF32 where the device has it.
  TY_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p->conv, type == ScalarType::kF32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH));
  int on = 0, oc = 0, oh = 0, ow = 0;
  TY_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
  TY_CHECK(oh == d.out_h && ow == d.out_w)
      << "conv: cuDNN computes an output of " << oh << "x" << ow << " for " << Describe(d);
  return p;
}

// The index of the first result (they come fastest first) that succeeded, fits
// kMaxWorkspaceBytes and, for f32 data, does not round the inputs to f16; else the successful
// one with the least workspace; -1 when none succeeded.
template <typename Perf>
int PickResult(const Perf* perf, int count, bool is_f32) {
  int smallest = -1;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (is_f32 && perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (perf[i].memory <= kMaxWorkspaceBytes) return i;
    if (smallest < 0 || perf[i].memory < perf[smallest].memory) smallest = i;
  }
  return smallest;
}

// Fills p's algorithm for `dir` and sets the conv descriptor's math type to the algorithm's.
// Returns false when cuDNN offers none.
bool ChooseForward(cudnnHandle_t h, Plan* p, bool is_f32) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  TY_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  const int i = PickResult(perf, count, is_f32);
  if (i < 0) return false;
  p->fwd = perf[i].algo;
  TY_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, perf[i].mathType));
  TY_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, p->fwd,
                                                         &p->workspace_bytes));
  return true;
}

bool ChooseBackwardData(cudnnHandle_t h, Plan* p, bool is_f32) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  TY_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, p->w, p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
  const int i = PickResult(perf, count, is_f32);
  if (i < 0) return false;
  p->bwd_data = perf[i].algo;
  TY_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, perf[i].mathType));
  TY_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x,
                                                              p->bwd_data, &p->workspace_bytes));
  return true;
}

bool ChooseBackwardFilter(cudnnHandle_t h, Plan* p, bool is_f32) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  TY_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
  const int i = PickResult(perf, count, is_f32);
  if (i < 0) return false;
  p->bwd_filter = perf[i].algo;
  TY_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, perf[i].mathType));
  TY_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
      h, p->x, p->y, p->conv, p->w, p->bwd_filter, &p->workspace_bytes));
  return true;
}

std::unique_ptr<Plan> BuildPlan(cudnnHandle_t h, Direction dir, ScalarType type,
                                const ConvDims& d) {
  std::unique_ptr<Plan> p = MakeDescriptors(type, d);
  const bool is_f32 = type == ScalarType::kF32;
  bool found = false;
  switch (dir) {
    case Direction::kForward:
      found = ChooseForward(h, p.get(), is_f32);
      break;
    case Direction::kBackwardData:
      found = ChooseBackwardData(h, p.get(), is_f32);
      break;
    case Direction::kBackwardFilter:
      found = ChooseBackwardFilter(h, p.get(), is_f32);
      break;
  }
  TY_CHECK(found) << "conv: cuDNN has no algorithm (direction " << static_cast<int>(dir)
                  << ", dtype " << static_cast<int>(type) << ") for " << Describe(d);
  return p;
}

using PlanKey = std::array<int64_t, 18>;

PlanKey MakeKey(Direction dir, ScalarType type, const ConvDims& d) {
  return {static_cast<int64_t>(dir),
          static_cast<int64_t>(type),
          d.n,
          d.c,
          d.h,
          d.w,
          d.k,
          d.r,
          d.s,
          d.stride_h,
          d.stride_w,
          d.pad_h,
          d.pad_w,
          d.dil_h,
          d.dil_w,
          d.groups,
          d.out_h,
          d.out_w};
}

// A stream's scratch memory on one device.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Note [cuDNN state]: one device's handle, workspaces and plans, all under mu.
struct DnnDevice {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<cudaStream_t, Workspace> workspaces;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  // At least `bytes` of scratch for `stream` (null for 0). Growing waits for the stream, so
  // work already enqueued there is done with the old buffer before it is freed.
  void* GetWorkspace(cudaStream_t stream, size_t bytes) {
    if (bytes == 0) return nullptr;
    Workspace& ws = workspaces[stream];
    if (ws.bytes >= bytes) return ws.ptr;
    if (ws.ptr != nullptr) {
      TY_CUDA_CHECK(cudaStreamSynchronize(stream));
      TY_CUDA_CHECK(cudaFree(ws.ptr));
      ws = Workspace{};
    }
    const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
    ws.ptr = AllocOrDie("conv: the cuDNN workspace", rounded);
    ws.bytes = rounded;
    return ws.ptr;
  }

  const Plan& GetPlan(Direction dir, ScalarType type, const ConvDims& d) {
    std::unique_ptr<Plan>& p = plans[MakeKey(dir, type, d)];
    if (p == nullptr) p = BuildPlan(handle, dir, type, d);
    return *p;
  }
};

// The calling thread's device's state, its handle created on first use. Never destroyed.
DnnDevice& CurrentDnnDevice(int* device) {
  TY_CUDA_CHECK(cudaGetDevice(device));
  static std::mutex* mu = new std::mutex();
  static auto* devices = new std::map<int, std::unique_ptr<DnnDevice>>();
  std::lock_guard<std::mutex> lock(*mu);
  std::unique_ptr<DnnDevice>& dev = (*devices)[*device];
  if (dev == nullptr) {
    dev = std::make_unique<DnnDevice>();
    TY_CUDNN_CHECK(cudnnCreate(&dev->handle));
  }
  return *dev;
}

// Runs `run(dev)` under the calling thread's device's mutex with its handle bound to `stream`;
// returns run's status.
template <typename F>
cudnnStatus_t WithHandle(Stream stream, const F& run) {
  int device = 0;
  DnnDevice& dev = CurrentDnnDevice(&device);
  std::lock_guard<std::mutex> lock(dev.mu);
  TY_CUDNN_CHECK(cudnnSetStream(dev.handle, AsStream(stream)));
  return run(dev);
}

// Runs `dir` for d: looks up the plan and the stream's workspace, then calls `run` with
// (handle, plan, workspace) under the device's mutex.
template <typename F>
void RunConv(Direction dir, ScalarType type, const ConvDims& d, Stream stream, const F& run) {
  CheckDims(d);
  const cudnnStatus_t st = WithHandle(stream, [&](DnnDevice& dev) {
    const Plan& plan = dev.GetPlan(dir, type, d);
    void* ws = dev.GetWorkspace(AsStream(stream), plan.workspace_bytes);
    return run(dev.handle, plan, ws);
  });
  TY_CHECK(st == CUDNN_STATUS_SUCCESS)
      << "conv: cuDNN failed: " << cudnnGetErrorString(st) << " (direction "
      << static_cast<int>(dir) << ") for " << Describe(d);
}

// Note [cuDNN batch norm]
// Training batch norm runs cuDNN's spatial mode over x viewed as (outer, c, inner, 1) when x
// has more than one value per channel and sample (inner > 1), at most 880801 rows, an element
// count that fits cuDNN's int, an eps cuDNN allows, and a weight (a null bias becomes zeros).
// PyTorch's rule (aten/src/ATen/native/Normalization.cpp) is close: inputs of 3 or more dims
// with weight and bias, the same row and size limits. cuDNN saves the batch's mean and
// 1 / sqrt(var + eps), the same pair our kernels save, so either backward takes either
// forward's. Other shapes, a backward that does not want x's gradient (cuDNN always writes it),
// and evaluation mode (an affine map by constant statistics, whose backward cuDNN does not
// have) run our kernels (norm.cu). PyTorch trains in the spatial-persistent mode, faster on
// some shapes, though its own comment reports accuracy losses on some models; plain spatial
// keeps the CPU reference's numerics, until a GPU measures both.
bool CudnnTakesBatchNorm(int64_t outer, int64_t c, int64_t inner, double eps, const float* weight) {
  return weight != nullptr && inner > 1 && outer >= 1 && outer <= 880801 && c >= 1 &&
         outer * c * inner < INT_MAX && eps >= CUDNN_BN_MIN_EPSILON;
}

// x's descriptor (outer, c, inner, 1) and the per-channel one derived from it.
struct BatchNormDescriptors {
  cudnnTensorDescriptor_t x = nullptr, channel = nullptr;

  BatchNormDescriptors(int64_t outer, int64_t c, int64_t inner) {
    TY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    TY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&channel));
    TY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                              static_cast<int>(outer), static_cast<int>(c),
                                              static_cast<int>(inner), 1));
    TY_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(channel, x, CUDNN_BATCHNORM_SPATIAL));
  }
  ~BatchNormDescriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(channel);
  }
  BatchNormDescriptors(const BatchNormDescriptors&) = delete;
  BatchNormDescriptors& operator=(const BatchNormDescriptors&) = delete;
};

// Runs `run(handle, descriptors)` for x (outer, c, inner) on `stream` under the device's mutex;
// aborts naming `what`, the shape and eps when cuDNN fails.
template <typename F>
void RunBatchNorm(const char* what, int64_t outer, int64_t c, int64_t inner, double eps,
                  Stream stream, const F& run) {
  const BatchNormDescriptors desc(outer, c, inner);
  const cudnnStatus_t st =
      WithHandle(stream, [&](DnnDevice& dev) { return run(dev.handle, desc); });
  TY_CHECK(st == CUDNN_STATUS_SUCCESS)
      << what << ": cuDNN failed: " << cudnnGetErrorString(st) << " for x (" << outer << ", " << c
      << ", " << inner << ") eps " << eps;
}

// alpha and beta are f32 for f32, bf16 and f16 data; beta 0 overwrites.
constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

// Calls f(part, x_offset, y_offset) over parts of the batch in which x and y have at most
// INT_MAX elements each (cuDNN's legacy descriptors take no more; PyTorch splits the batch the
// same way). The offsets, in elements, are of the part's first item in x (and gx) and y (gy).
template <typename F>
void ForEachBatchPart(const ConvDims& d, const F& f) {
  const int64_t x_item = d.c * d.h * d.w, y_item = d.k * d.out_h * d.out_w;
  const int64_t item = std::max({x_item, y_item, int64_t{1}});
  TY_CHECK(item <= INT_MAX) << "conv: one item of the batch has " << item
                            << " elements, more than cuDNN takes (" << INT_MAX
                            << "): " << Describe(d);
  const int64_t part = INT_MAX / item;
  for (int64_t first = 0; first < d.n; first += part) {
    ConvDims p = d;
    p.n = std::min(part, d.n - first);
    f(p, first * x_item, first * y_item);
  }
}

// p advanced by `elements` elements of `type` (f32, bf16 or f16).
template <typename P>
P Advance(P p, ScalarType type, int64_t elements) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<P>>, const char, char>;
  return static_cast<Byte*>(p) + elements * (type == ScalarType::kF32 ? 4 : 2);
}

}  // namespace

void CudaBackendImpl::ConvForward(ScalarType type, const ConvDims& d, const void* x, const void* w,
                                  void* y, Stream stream) {
  ForEachBatchPart(d, [&](const ConvDims& part, int64_t x_offset, int64_t y_offset) {
    const void* xp = Advance(x, type, x_offset);
    void* yp = Advance(y, type, y_offset);
    RunConv(Direction::kForward, type, part, stream, [&](cudnnHandle_t h, const Plan& p, void* ws) {
      return cudnnConvolutionForward(h, &kOne, p.x, xp, p.w, w, p.conv, p.fwd, ws,
                                     p.workspace_bytes, &kZero, p.y, yp);
    });
  });
}

void CudaBackendImpl::ConvBackwardData(ScalarType type, const ConvDims& d, const void* w,
                                       const void* gy, void* gx, Stream stream) {
  ForEachBatchPart(d, [&](const ConvDims& part, int64_t x_offset, int64_t y_offset) {
    const void* gyp = Advance(gy, type, y_offset);
    void* gxp = Advance(gx, type, x_offset);
    RunConv(Direction::kBackwardData, type, part, stream,
            [&](cudnnHandle_t h, const Plan& p, void* ws) {
              return cudnnConvolutionBackwardData(h, &kOne, p.w, w, p.y, gyp, p.conv, p.bwd_data,
                                                  ws, p.workspace_bytes, &kZero, p.x, gxp);
            });
  });
}

void CudaBackendImpl::ConvBackwardFilter(ScalarType type, const ConvDims& d, const void* x,
                                         const void* gy, void* gw, Stream stream) {
  if (d.n == 0) {  // an empty batch: the gradient is zero
    CheckDims(d);
    Fill(type, d.k * (d.c / d.groups) * d.r * d.s, gw, 0.0, stream);
    return;
  }
  ForEachBatchPart(d, [&](const ConvDims& part, int64_t x_offset, int64_t y_offset) {
    const void* xp = Advance(x, type, x_offset);
    const void* gyp = Advance(gy, type, y_offset);
    // The first part overwrites gw, later ones add to it.
    const float* beta = x_offset == 0 && y_offset == 0 ? &kZero : &kOne;
    RunConv(Direction::kBackwardFilter, type, part, stream,
            [&](cudnnHandle_t h, const Plan& p, void* ws) {
              return cudnnConvolutionBackwardFilter(h, &kOne, p.x, xp, p.y, gyp, p.conv,
                                                    p.bwd_filter, ws, p.workspace_bytes, beta, p.w,
                                                    gw);
            });
  });
}

void CudaBackendImpl::BatchNormTrainingForward(const float* x, const float* weight,
                                               const float* bias, float* y, float* running_mean,
                                               float* running_var, double momentum, double eps,
                                               float* mean, float* invstd, int64_t outer, int64_t c,
                                               int64_t inner, Stream stream) {
  if (!CudnnTakesBatchNorm(outer, c, inner, eps, weight)) {
    OwnBatchNormTrainingForward(x, weight, bias, y, running_mean, running_var, momentum, eps, mean,
                                invstd, outer, c, inner, stream);
    return;
  }
  const cudaStream_t st = AsStream(stream);
  float* zeros = nullptr;
  if (bias == nullptr) {
    zeros = Scratch<float>("batch_norm", c, st);
    TY_CUDA_CHECK(cudaMemsetAsync(zeros, 0, static_cast<size_t>(c) * sizeof(float), st));
  }
  RunBatchNorm("batch_norm", outer, c, inner, eps, stream,
               [&](cudnnHandle_t h, const BatchNormDescriptors& d) {
                 return cudnnBatchNormalizationForwardTraining(
                     h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, d.x, x, d.x, y, d.channel, weight,
                     bias != nullptr ? bias : zeros, momentum, running_mean, running_var, eps, mean,
                     invstd);
               });
  if (zeros != nullptr) TY_CUDA_CHECK(cudaFreeAsync(zeros, st));
}

void CudaBackendImpl::BatchNormBackward(const float* x, const float* gy, const float* mean,
                                        const float* invstd, const float* weight, float* gx,
                                        float* gweight, float* gbias, int64_t outer, int64_t c,
                                        int64_t inner, bool training, double eps, Stream stream) {
  // cuDNN always writes gx; without it our kernels compute just the parameters' gradients.
  if (!training || gx == nullptr || !CudnnTakesBatchNorm(outer, c, inner, eps, weight)) {
    OwnBatchNormBackward(x, gy, mean, invstd, weight, gx, gweight, gbias, outer, c, inner, training,
                         stream);
    return;
  }
  const cudaStream_t st = AsStream(stream);
  // cuDNN writes both parameter gradients; the ones nobody asked for go to scratch.
  float* scratch = nullptr;
  if (gweight == nullptr || gbias == nullptr)
    scratch = Scratch<float>("batch_norm backward", 2 * c, st);
  RunBatchNorm("batch_norm backward", outer, c, inner, eps, stream,
               [&](cudnnHandle_t h, const BatchNormDescriptors& d) {
                 return cudnnBatchNormalizationBackward(
                     h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, d.x, x, d.x, gy, d.x,
                     gx, d.channel, weight, gweight != nullptr ? gweight : scratch,
                     gbias != nullptr ? gbias : scratch + c, eps, mean, invstd);
               });
  if (scratch != nullptr) TY_CUDA_CHECK(cudaFreeAsync(scratch, st));
}

}  // namespace trainyard::kernels::cuda
