// The GPU benchmarks (tools/gpu_check.sh), a plain main() printing one JSON line per
// measurement. bench/torch_gpt2_step.py is PyTorch's side of both modes.
//
//   cuda_bench matmul
//   cuda_bench attention
//   cuda_bench batchnorm
//   cuda_bench gpt2 [--batch B] [--steps S]
//
// attention: GPT-2 small's causal attention, (16, 12, 1024, 64) bf16, forward + backward,
// through the fused flash-style kernel (is_causal) and through the composed ops (the same causal
// mask passed explicitly: batched cuBLASLt products and the fused softmax), milliseconds each,
// so the first GPU run says which one the model should take.
//
// batchnorm: training batch norm (cuDNN's path, kernels/cuda/dnn.cc) forward + backward on f32
// NCHW at ResNet-50's widest shapes, batch 32, milliseconds each (3 warm-ups, 20 timed);
// torch_gpt2_step.py --batch-norm times F.batch_norm on the same shapes.
//
// matmul: C = A B for square n x n A, B on cuda:0, n in {4096, 8192}, "bf16" (bf16 tensors,
// f32 accumulation) and "tf32" (f32 tensors; the engine's f32 product uses TF32 tensor cores).
// Each is timed through the engine (ops::Matmul under NoGradGuard) and through a direct
// cuBLASLt call written here (its own handle, stream and 32 MiB workspace, the heuristic's first
// algorithm) on the same A and B: 3 warm-ups, then 20 products between two synchronisations.
// TFLOP/s = 2 n^3 / seconds per product; "ratio" is engine / cublas.
//
// gpt2: one training step of GPT-2 small (worker/nn/gpt.h: 12 layers, width 768, 12 heads,
// context 1024, vocabulary 50257, dropout 0, bias) on cuda:0: forward and cross-entropy under
// bf16 autocast, backward, AdamW (lr 6e-4, weight decay 0.1), zero_grad(set_to_none), on random
// tokens fixed once on the device, reading loss.item() every step as a trainer does. 2 warm-up
// steps, then S (default 10) timed ones. Note [Choosing the batch] says what --batch 0 does.
// MFU is nanoGPT's estimate_mfu: (6 N + 12 n_layer n_embd T) * tokens/s / 989.4e12, with N
// nanoGPT's get_num_params() (position embeddings excluded) and 989.4 TFLOP/s the H100/H200
// dense bf16 peak. phase_ms: forward (with the loss), backward and optimizer (with zero_grad),
// averaged over 3 more steps with the device synchronised between phases.
//
// Where there is no usable GPU (no libtrainyard_cuda.so, no driver, no device) it prints
// {"skipped": "<why>"} and exits 0, so it runs anywhere. $TRAINYARD_CUDA_LIB, when unset, is set
// to the library this binary was built with.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/json.h"
#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/nn/gpt.h"
#include "worker/ops/attention.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/loss.h"
#include "worker/ops/norm.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"

namespace ty = trainyard;

#define BENCH_CUDA_CHECK(expr)                                                              \
  do {                                                                                      \
    const cudaError_t bench_err_ = (expr);                                                  \
    TY_CHECK(bench_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(bench_err_); \
  } while (0)

#define BENCH_CUBLAS_CHECK(expr)                                \
  do {                                                          \
    const cublasStatus_t bench_st_ = (expr);                    \
    TY_CHECK(bench_st_ == CUBLAS_STATUS_SUCCESS)                \
        << #expr << ": " << cublasLtGetStatusString(bench_st_); \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;
const ty::Device kCuda0 = ty::Device::Cuda(0);
constexpr int kMatmulWarmup = 3;
constexpr int kMatmulIters = 20;
constexpr double kPeakBf16Flops = 989.4e12;  // H100/H200 SXM dense bf16

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "cuda_bench: %s\nusage: cuda_bench matmul\n       cuda_bench attention\n       "
               "cuda_bench batchnorm\n       "
               "cuda_bench gpt2 [--batch B] "
               "[--steps S]   (--batch 0, the default, picks 32, 16 or 8)\n",
               why.c_str());
  std::exit(2);
}

void PrintJson(const ty::Json& j) {
  std::printf("%s\n", j.Dump().c_str());
  std::fflush(stdout);
}

double Round(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Loads the CUDA backend; on failure prints the skip line and returns false.
bool CudaReady(ty::cuda::DeviceProperties* props) {
  if (std::getenv("TRAINYARD_CUDA_LIB") == nullptr) setenv("TRAINYARD_CUDA_LIB", TY_CUDA_LIB, 1);
  std::string why;
  ty::StatusOr<ty::cuda::Backend*> backend = ty::LoadCudaBackend();
  if (!backend.ok()) {
    why = "CUDA backend not available: " + backend.status().ToString();
  } else if ((*backend)->DeviceCount() == 0) {
    why = "no CUDA device";
  } else if (ty::Status st = (*backend)->Properties(0, props); !st.ok()) {
    why = "cuda:0 properties: " + st.ToString();
  }
  if (why.empty()) return true;
  std::fprintf(stderr, "cuda_bench: skipped: %s\n", why.c_str());
  PrintJson(ty::Json::Object({{"skipped", why}}));
  return false;
}

// ---- matmul ----

// A column-major n x n x n product C = A B through cuBLASLt, set up once: what a hand-written
// call to the library gets, the yardstick for the engine's GEMM. A, B, C are device pointers.
class LtSquareGemm {
 public:
  LtSquareGemm(int64_t n, bool bf16) {
    const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    BENCH_CUDA_CHECK(cudaSetDevice(0));
    BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BENCH_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    BENCH_CUBLAS_CHECK(cublasLtCreate(&handle_));
    BENCH_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    const cublasOperation_t no_trans = CUBLAS_OP_N;
    BENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &no_trans,
                                                      sizeof(no_trans)));
    BENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                                      sizeof(no_trans)));
    BENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, n, n, n));
    ChooseAlgorithm();
  }
  ~LtSquareGemm() {
    cublasLtMatrixLayoutDestroy(layout_);
    cublasLtMatmulDescDestroy(desc_);
    cublasLtDestroy(handle_);
    cudaFree(workspace_);
    cudaStreamDestroy(stream_);
  }
  LtSquareGemm(const LtSquareGemm&) = delete;
  LtSquareGemm& operator=(const LtSquareGemm&) = delete;

  // Queues C = A B on this object's stream.
  void Run(const void* a, const void* b, void* c) {
    const float alpha = 1, beta = 0;
    BENCH_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, &alpha, a, layout_, b, layout_, &beta, c,
                                      layout_, c, layout_, &algo_, workspace_, kWorkspaceBytes,
                                      stream_));
  }
  void Synchronize() { BENCH_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  void ChooseAlgorithm() {
    cublasLtMatmulPreference_t pref = nullptr;
    BENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspaceBytes;
    BENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    BENCH_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_, layout_, layout_,
                                                      layout_, pref, 1, &result, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    TY_CHECK(found > 0) << "cuBLASLt has no algorithm for this product";
    algo_ = result.algo;
  }

  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layout_ = nullptr;  // n x n, leading dimension n: A, B, C and D
  cublasLtMatmulAlgo_t algo_{};
};

double EngineMatmulSeconds(const ty::Tensor& a, const ty::Tensor& b) {
  ty::NoGradGuard no_grad;
  for (int i = 0; i < kMatmulWarmup; ++i) ty::ops::Matmul(a, b);
  ty::SynchronizeDevice(kCuda0);
  const auto t0 = Clock::now();
  for (int i = 0; i < kMatmulIters; ++i) ty::ops::Matmul(a, b);
  ty::SynchronizeDevice(kCuda0);
  return Seconds(t0) / kMatmulIters;
}

// The same product on the engine's A and B (ready on the device: the caller synchronised).
double CublasMatmulSeconds(const ty::Tensor& a, const ty::Tensor& b, bool bf16) {
  const int64_t n = a.size(0);
  LtSquareGemm gemm(n, bf16);
  void* c = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&c, static_cast<size_t>(n * n) * (bf16 ? 2 : 4)));
  for (int i = 0; i < kMatmulWarmup; ++i) gemm.Run(a.raw_data(), b.raw_data(), c);
  gemm.Synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < kMatmulIters; ++i) gemm.Run(a.raw_data(), b.raw_data(), c);
  gemm.Synchronize();
  const double secs = Seconds(t0) / kMatmulIters;
  BENCH_CUDA_CHECK(cudaFree(c));
  return secs;
}

int RunMatmul(const ty::cuda::DeviceProperties& props) {
  ty::Generator gen(1234);
  for (int64_t n : {4096, 8192}) {
    for (const char* precision : {"bf16", "tf32"}) {
      const bool bf16 = std::string(precision) == "bf16";
      const ty::TensorOptions opts =
          ty::Options(bf16 ? ty::DType::kBFloat16 : ty::DType::kFloat32).set_device(kCuda0);
      const ty::Tensor a = ty::Randn({n, n}, opts, &gen), b = ty::Randn({n, n}, opts, &gen);
      const double engine_s = EngineMatmulSeconds(a, b);  // ends synchronised
      const double cublas_s = CublasMatmulSeconds(a, b, bf16);
      const double flops = 2.0 * static_cast<double>(n) * n * n;
      PrintJson(ty::Json::Object({{"bench", "matmul"},
                                  {"impl", "trainyard"},
                                  {"device", props.name},
                                  {"n", n},
                                  {"precision", precision},
                                  {"iters", kMatmulIters},
                                  {"engine_tflops", Round(flops / engine_s / 1e12, 2)},
                                  {"cublas_tflops", Round(flops / cublas_s / 1e12, 2)},
                                  {"ratio", Round(cublas_s / engine_s, 3)}}));
    }
  }
  return 0;
}

// ---- gpt2 ----

struct GptFlags {
  int64_t batch = 0;  // 0: Note [Choosing the batch]
  int steps = 10;
};

int64_t IntFlag(const std::string& flag, const char* value, long min) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < min || v > 1000000) {
    Usage(flag + " is \"" + value + "\"; it must be a whole number >= " + std::to_string(min));
  }
  return v;
}

GptFlags ParseGptFlags(int argc, char** argv) {
  GptFlags f;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--batch") {
      f.batch = IntFlag(a, v, 0);
    } else if (a == "--steps") {
      f.steps = static_cast<int>(IntFlag(a, v, 1));
    } else {
      Usage("unknown flag " + a);
    }
  }
  return f;
}

template <typename T>
T Must(ty::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(v).value();
}

void Must(const ty::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

// Milliseconds per call of `once` on cuda:0: 3 warm-up calls, then `iters` between two
// synchronisations.
template <typename F>
double MeanMs(const F& once, int iters) {
  for (int i = 0; i < 3; ++i) once();
  ty::SynchronizeDevice(kCuda0);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) once();
  ty::SynchronizeDevice(kCuda0);
  return Seconds(t0) / iters * 1e3;
}

// ---- attention ----

// Milliseconds of one forward + backward of causal attention, fused or composed.
double AttentionMs(const ty::Tensor& q, const ty::Tensor& k, const ty::Tensor& v,
                   const ty::Tensor& mask, bool fused) {
  return MeanMs(
      [&] {
        const ty::Tensor out = fused ? ty::ops::ScaledDotProductAttention(q, k, v, true)
                                     : ty::ops::ScaledDotProductAttention(q, k, v, false, mask);
        Must(ty::autograd::Backward(ty::ops::Sum(out)), "attention backward");
      },
      10);
}

int RunAttention(const ty::cuda::DeviceProperties& props) {
  ty::Generator gen(99);
  const int64_t b = 16, h = 12, t = 1024, e = 64;
  const ty::TensorOptions opts = ty::Options(ty::DType::kBFloat16).set_device(kCuda0);
  auto leaf = [&] { return ty::Randn({b, h, t, e}, opts, &gen).set_requires_grad(true); };
  const ty::Tensor q = leaf(), k = leaf(), v = leaf();
  const ty::Tensor rows = ty::ops::Reshape(ty::Arange(t), {t, 1});
  const ty::Tensor cols = ty::ops::Reshape(ty::Arange(t), {1, t});
  const ty::Tensor mask = Must(ty::ops::To(ty::ops::Le(cols, rows), kCuda0), "the mask");
  const double fused = AttentionMs(q, k, v, mask, true);
  const double composed = AttentionMs(q, k, v, mask, false);
  PrintJson(ty::Json::Object({{"bench", "attention"},
                              {"impl", "trainyard"},
                              {"device", props.name},
                              {"shape", "16x12x1024x64 bf16 causal, forward+backward"},
                              {"fused_ms", Round(fused, 3)},
                              {"composed_ms", Round(composed, 3)}}));
  return 0;
}

// ---- batchnorm ----

// ResNet-50's batch norm shapes at batch 32 (its widest early, middle and last layers), f32.
constexpr int64_t kBatchNormShapes[][4] = {{32, 64, 112, 112}, {32, 256, 56, 56}, {32, 2048, 7, 7}};

int RunBatchNorm(const ty::cuda::DeviceProperties& props) {
  ty::Generator gen(7);
  const ty::TensorOptions opts = ty::Options(ty::DType::kFloat32).set_device(kCuda0);
  for (const auto& shape : kBatchNormShapes) {
    const int64_t c = shape[1];
    const ty::Tensor x =
        ty::Randn({shape[0], c, shape[2], shape[3]}, opts, &gen).set_requires_grad(true);
    const ty::Tensor w = ty::Ones({c}, opts).set_requires_grad(true);
    const ty::Tensor b = ty::Zeros({c}, opts).set_requires_grad(true);
    const ty::Tensor mean = ty::Zeros({c}, opts), var = ty::Ones({c}, opts);
    const double ms = MeanMs(
        [&] {
          const ty::Tensor y = ty::ops::BatchNorm(x, mean, var, w, b, /*training=*/true);
          Must(ty::autograd::Backward(ty::ops::Sum(y)), "batch norm backward");
        },
        20);
    const std::string dims = std::to_string(shape[0]) + "x" + std::to_string(c) + "x" +
                             std::to_string(shape[2]) + "x" + std::to_string(shape[3]);
    PrintJson(ty::Json::Object({{"bench", "batchnorm"},
                                {"impl", "trainyard"},
                                {"device", props.name},
                                {"shape", dims + " f32 training, forward+backward"},
                                {"ms", Round(ms, 3)}}));
  }
  return 0;
}

// The model on cuda:0 with its optimizer and a batch of tokens.
struct GptSetup {
  ty::nn::GptConfig config;
  std::shared_ptr<ty::nn::Gpt> model;
  std::unique_ptr<ty::optim::Optimizer> optimizer;
  ty::Tensor input, target;  // int64 (B, T) on cuda:0
  int64_t batch = 0;
};

GptSetup MakeGptSetup(ty::Generator* gen) {
  GptSetup s;
  s.config.n_layer = 12;
  s.config.n_embd = 768;
  s.config.n_head = 12;
  s.config.context = 1024;
  s.config.vocab_size = 50257;
  s.config.dropout = 0;
  s.config.bias = true;
  Must(ty::nn::Validate(s.config), "gpt config");
  s.model = std::make_shared<ty::nn::Gpt>(s.config, gen);
  s.model->Train(true);
  Must(s.model->To(kCuda0), "moving the model to cuda:0");
  const ty::nn::NamedTensors named = s.model->NamedParameters();
  ty::optim::AdamWOptions o;
  o.lr = 6e-4;
  o.weight_decay = 0.1;
  s.optimizer = Must(ty::optim::AdamW::Create({named.begin(), named.end()}, o), "adamw");
  return s;
}

// Random tokens for `batch` sequences, drawn once and kept on the device.
void SetBatch(GptSetup& s, int64_t batch, ty::Generator* gen) {
  const int64_t t = s.config.context;
  const ty::Tensor tokens =
      ty::RandInt({batch, t + 1}, 0, s.config.vocab_size, ty::Options(ty::DType::kInt64), gen);
  s.input = ty::CopyToDevice(ty::ops::Narrow(tokens, 1, 0, t), kCuda0);
  s.target = ty::CopyToDevice(ty::ops::Narrow(tokens, 1, 1, t), kCuda0);
  s.batch = batch;
}

// Seconds spent in each phase of a step, summed over the steps that measure them.
struct Phases {
  double forward = 0, backward = 0, optimizer = 0;
};

// forward + loss under bf16 autocast, backward, step, zero_grad(set_to_none); the loss. With
// `phases`, the device is synchronised after each phase and the phase's time added there.
double TrainStep(GptSetup& s, Phases* phases = nullptr) {
  auto t = Clock::now();
  auto lap = [&](double Phases::*phase) {
    if (phases == nullptr) return;
    ty::SynchronizeDevice(kCuda0);
    phases->*phase += Seconds(t);
    t = Clock::now();
  };
  const int64_t rows = s.batch * s.config.context;
  ty::Tensor loss;
  {
    ty::AutocastGuard autocast(ty::DType::kBFloat16);
    const ty::Tensor logits = s.model->Forward(s.input);  // (B, T, V)
    loss = ty::ops::CrossEntropy(ty::ops::Reshape(logits, {rows, s.config.vocab_size}),
                                 ty::ops::Reshape(s.target, {rows}));
  }
  lap(&Phases::forward);
  Must(ty::autograd::Backward(loss), "backward");
  lap(&Phases::backward);
  s.optimizer->Step();
  s.optimizer->ZeroGrad(/*set_to_none=*/true);
  lap(&Phases::optimizer);
  return loss.item();
}

// Note [Choosing the batch]
// The engine aborts on out-of-memory, so "the largest of 32, 16, 8 that fits" cannot be found by
// trying. Instead two steps run at batch 8 (the first creates AdamW's state); around the second
// the allocator gives the resident bytes (weights and optimizer state) and the step's peak, and
// activation memory is taken as linear in the batch: peak(B) = resident + (peak8 - resident) *
// B / 8. The largest B whose estimate stays under 85% of the device's memory is used (the rest
// covers the CUDA context, cuBLAS workspaces and fragmentation of the caching allocator). Those
// two steps are extra warm-up; the timed batch still gets its own 2 warm-up steps.
int64_t ChooseBatch(GptSetup& s, const ty::cuda::DeviceProperties& props, ty::Generator* gen,
                    double* estimate_gib) {
  constexpr int64_t kProbe = 8;
  SetBatch(s, kProbe, gen);
  TrainStep(s);
  ty::DeviceCachingAllocator& alloc = ty::CudaAllocator(0);
  const double resident = static_cast<double>(alloc.Stats().allocated_bytes);
  alloc.ResetPeak();
  TrainStep(s);
  const double per_sequence = (static_cast<double>(alloc.Stats().peak_allocated_bytes) - resident) /
                              static_cast<double>(kProbe);
  const double budget = 0.85 * static_cast<double>(props.total_memory);
  for (int64_t b : {32, 16, 8}) {
    *estimate_gib = (resident + per_sequence * static_cast<double>(b)) / (1 << 30);
    if (resident + per_sequence * static_cast<double>(b) <= budget) return b;
  }
  return kProbe;  // what already ran
}

int RunGpt2(const GptFlags& f, const ty::cuda::DeviceProperties& props) {
  ty::Generator gen(1234);
  GptSetup s = MakeGptSetup(&gen);
  double estimate_gib = 0;
  const int64_t batch = f.batch > 0 ? f.batch : ChooseBatch(s, props, &gen, &estimate_gib);
  SetBatch(s, batch, &gen);
  ty::CudaAllocator(0).ResetPeak();
  for (int i = 0; i < 2; ++i) TrainStep(s);
  const auto t0 = Clock::now();
  double loss = 0;
  for (int i = 0; i < f.steps; ++i) loss = TrainStep(s);
  ty::SynchronizeDevice(kCuda0);
  const double secs = Seconds(t0);
  // Then a few steps synchronised between phases, to say where the time goes.
  constexpr int kPhaseSteps = 3;
  Phases phases;
  for (int i = 0; i < kPhaseSteps; ++i) TrainStep(s, &phases);

  const int64_t t = s.config.context;
  const double tokens_per_s = static_cast<double>(batch * t * f.steps) / secs;
  const double n_params = static_cast<double>(s.model->NumNonEmbeddingParameters());
  const double flops_per_token = 6 * n_params + 12.0 * static_cast<double>(s.config.n_layer) *
                                                    static_cast<double>(s.config.n_embd * t);
  const ty::DeviceAllocatorStats stats = ty::CudaAllocator(0).Stats();
  ty::Json out = ty::Json::Object({
      {"bench", "gpt2"},
      {"impl", "trainyard"},
      {"device", props.name},
      {"batch", batch},
      {"batch_choice", f.batch > 0 ? "flag" : "estimated from a batch-8 step"},
      {"seq_len", t},
      {"steps", f.steps},
      {"tokens_per_s", Round(tokens_per_s, 1)},
      {"step_ms", Round(secs / f.steps * 1e3, 2)},
      {"peak_allocated_gib", Round(static_cast<double>(stats.peak_allocated_bytes) / (1 << 30), 3)},
      {"peak_reserved_gib", Round(static_cast<double>(stats.peak_reserved_bytes) / (1 << 30), 3)},
      {"mfu", Round(flops_per_token * tokens_per_s / kPeakBf16Flops, 4)},
      {"params", s.model->NumParameters()},
      {"mfu_params", s.model->NumNonEmbeddingParameters()},
      {"loss", Round(loss, 4)},
      {"phase_ms", ty::Json::Object({
                       {"forward", Round(phases.forward / kPhaseSteps * 1e3, 2)},
                       {"backward", Round(phases.backward / kPhaseSteps * 1e3, 2)},
                       {"optimizer", Round(phases.optimizer / kPhaseSteps * 1e3, 2)},
                   })},
  });
  if (f.batch == 0) out.Set("estimated_peak_gib", Round(estimate_gib, 3));
  PrintJson(out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage("missing mode");
  const std::string mode = argv[1];
  if (mode != "matmul" && mode != "attention" && mode != "batchnorm" && mode != "gpt2") {
    Usage("unknown mode \"" + mode + "\"");
  }
  if (mode != "gpt2" && argc > 2) Usage(mode + " takes no flags");
  const GptFlags flags = mode == "gpt2" ? ParseGptFlags(argc, argv) : GptFlags{};
  ty::cuda::DeviceProperties props;
  if (!CudaReady(&props)) return 0;
  if (mode == "attention") return RunAttention(props);
  if (mode == "batchnorm") return RunBatchNorm(props);
  return mode == "matmul" ? RunMatmul(props) : RunGpt2(flags, props);
}
