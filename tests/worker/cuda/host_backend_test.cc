// The engine's CUDA dispatch on a fake device over host memory (tests/testing/host_backend.h):
// the parity suites of backend_parity.h on it (the "Host" backend), and what only HostBackend
// shows: device copies and moves, which kernels an op launches and where the host waits, the
// deferred index checks' bookkeeping, devices it is told to have and their memory limits.
// Runs in every build.
#include "tests/testing/host_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "tests/testing/golden.h"
#include "tests/worker/cuda/backend_parity.h"
#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/nn/gpt.h"
#include "worker/nn/linear.h"
#include "worker/ops/attention.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/linalg.h"
#include "worker/ops/loss.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/optim/clip_grad.h"
#include "worker/optim/grad_scaler.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/views.h"

namespace trainyard::testing {
namespace {

using ::testing::HasSubstr;

const Device kCuda = Device::Cuda(0);

// Makes `backend` the process's CUDA backend while in scope. Tensors on it must be gone first
// (the allocators are dropped with the backend), so declare it before them.
class ScopedBackend {
 public:
  explicit ScopedBackend(HostBackend* backend) { SetCudaBackendForTesting(backend); }
  ~ScopedBackend() { SetCudaBackendForTesting(nullptr); }
  ScopedBackend(const ScopedBackend&) = delete;
  ScopedBackend& operator=(const ScopedBackend&) = delete;
};

class HostBackendTest : public ::testing::Test {
 protected:
  HostBackend backend_;
  ScopedBackend scope_{&backend_};
};

// ---- The parity suites (backend_parity_test.cc) on HostBackend ----

// A fresh HostBackend per test, so its launch counts start at 0.
class HostParity final : public ParityBackend {
 public:
  std::string name() const override { return "Host"; }
  void Install() override {
    backend_ = std::make_unique<HostBackend>();
    SetCudaBackendForTesting(backend_.get());
  }
  void Uninstall() override {
    SetCudaBackendForTesting(nullptr);  // drops the allocators, which free into the backend
    backend_.reset();
  }
  std::optional<int64_t> Launches(const std::string& kernel) const override {
    return kernel.empty() ? backend_->kernel_launches() : backend_->launches(kernel);
  }
  // The kernels are the CPU's, so f32 differs only where the CUDA path orders operations
  // differently (fused bias, composed variance, the attention reference).
  double F32Tolerance(bool) const override { return 1e-5; }
  double GptLossTolerance() const override { return 1e-5; }
  double GptParamTolerance() const override { return 1e-5; }

 private:
  std::unique_ptr<HostBackend> backend_;
};

ParityBackend* HostParityBackend() {
  static auto* backend = new HostParity();
  return backend;
}

}  // namespace

TY_PARITY_SUITES(Host, HostParityBackend(), 7001);

namespace {

// ---- Copies, moves and reads ----

TEST_F(HostBackendTest, CopiesRoundTripFromStridedSourcesOnBothSides) {
  Generator gen(11);
  Tensor x = Uniform({7, 13}, -1, 1, {}, &gen);
  Tensor xt = views::Transpose(x, 0, 1);  // (13, 7), strided on the CPU
  Tensor d = CopyToDevice(xt, kCuda);
  EXPECT_TRUE(d.device().is_cuda());
  EXPECT_TRUE(d.is_contiguous());
  EXPECT_EQ(ToVector<float>(d), ToVector<float>(xt));
  Tensor ds = views::Slice(views::Transpose(d, 0, 1), 1, 1, 13, 3);  // strided on the device
  EXPECT_EQ(ToVector<float>(CopyToDevice(ds, Device::Cpu())),
            ToVector<float>(views::Slice(x, 1, 1, 13, 3)));
  // Into a strided CPU destination, from a converted device tensor.
  Tensor half = CopyToDevice(ConvertTo(views::Slice(x, 1, 0, 5), DType::kBFloat16), kCuda);
  Tensor dst = Zeros({5, 7});
  CopyInto(views::Transpose(dst, 0, 1), half);  // (7, 5): bf16 on cuda:0 to f32 on the CPU
  EXPECT_EQ(ToVector<float>(views::Transpose(dst, 0, 1)),
            ToVector<float>(ConvertTo(views::Slice(x, 1, 0, 5), DType::kBFloat16)));
  // Broadcasting a device row into every row of a strided CPU destination.
  Tensor rows = Zeros({5, 3});
  CopyInto(views::Transpose(rows, 0, 1), views::Select(half, 0, 2));
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_EQ(ToVector<float>(views::Select(rows, 1, r)),
              ToVector<float>(views::Select(half, 0, 2)));
  // Into a strided device destination.
  Tensor on_dev = Zeros({13, 7}, Options(DType::kFloat32).set_device(kCuda));
  CopyInto(views::Transpose(on_dev, 0, 1), x);
  EXPECT_EQ(ToVector<float>(on_dev), ToVector<float>(xt));
}

TEST_F(HostBackendTest, ToDeviceIsDifferentiableBackToTheCpu) {
  Tensor x = Uniform({5, 3}, -1, 1, {}, nullptr).set_requires_grad(true);
  StatusOr<Tensor> y = ops::To(x, kCuda);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_TRUE(autograd::Backward(ops::Sum(ops::Mul(*y, *y))).ok());
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().device().is_cpu());
  EXPECT_EQ(ToVector<float>(x.grad()), ToVector<float>(ops::MulScalar(x.detach(), 2)));
}

TEST_F(HostBackendTest, ToAnInvisibleDeviceIsFailedPrecondition) {
  StatusOr<Tensor> y = ops::To(Zeros({2}), Device::Cuda(1));
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(y.status().message(), HasSubstr("cuda:1 is not available: 1 CUDA device(s)"));
}

TEST_F(HostBackendTest, ItemToVectorAndToStringReadDeviceTensors) {
  Tensor t = Full({2, 3}, 1.5, Options(DType::kFloat32).set_device(kCuda));
  EXPECT_EQ(ToVector<float>(t), std::vector<float>(6, 1.5f));
  EXPECT_EQ(ops::Sum(t).item(), 9.0);
  EXPECT_THAT(t.ToString(), HasSubstr("device='cuda:0'"));
  Tensor i = Arange(5, Options(DType::kInt64).set_device(kCuda));
  EXPECT_EQ(ToVector<int64_t>(i), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST_F(HostBackendTest, DeviceMemoryFaultsWhenTheHostReadsIt) {
  Tensor t = Zeros({4}, Options(DType::kFloat32).set_device(kCuda));
  EXPECT_DEATH(
      {
        volatile float v = *static_cast<float*>(t.raw_data());
        (void)v;
      },
      "");
}

// ---- StreamTimer ----

// Busy for at least `d` (work the timer must see; not a wait for anything).
void Spin(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

TEST_F(HostBackendTest, StreamTimerTimesTheSpansBetweenMarksOnBothKindsOfDevice) {
  for (const Device device : {kCuda, Device::Cpu()}) {
    StreamTimer timer(device);
    const int a = timer.Mark();
    Spin(std::chrono::milliseconds(5));
    const int b = timer.Mark();
    EXPECT_GE(timer.Seconds(a, b), 0.005) << device.ToString();
    EXPECT_LT(timer.Seconds(a, b), 5.0) << device.ToString();
    EXPECT_EQ(timer.Seconds(b, b), 0) << device.ToString();
    timer.Clear();
    EXPECT_EQ(timer.Mark(), 0) << "marks start again after Clear";
  }
}

// ---- Index checks on the device (Note [Deferred index checks]) ----

TEST_F(HostBackendTest, AnOutOfRangeTokenIdIsReportedAtTheNextWaitWithoutOneBefore) {
  const Tensor w = ops::Reshape(Arange(10, Options(DType::kFloat32).set_device(kCuda)), {5, 2});
  const Tensor ids = CopyToDevice(FromVector<int64_t>({1, 9, 2}), kCuda);
  const int64_t waits = backend_.launches("Sync");
  const Tensor e = ops::Embedding(w, ids);
  EXPECT_EQ(backend_.launches("Sync"), waits) << "the check made the host wait";
  EXPECT_EQ(backend_.launches("CheckIndices"), 1);
  EXPECT_DEATH(ToVector<float>(e),
               "embedding: index 9 is out of range for dim 0 of size 5 \\(on cuda:0: found by a "
               "check the host did not wait for");
}

TEST_F(HostBackendTest, AnOutOfRangeTargetIsReportedAtTheLossItem) {
  const Tensor logits = Zeros({3, 4}, Options(DType::kFloat32).set_device(kCuda));
  const Tensor target = CopyToDevice(FromVector<int64_t>({-100, 3, 4}), kCuda);
  const Tensor loss = ops::CrossEntropy(logits, target);
  EXPECT_DEATH(loss.item(),
               "cross_entropy: target 4 is out of range for 4 classes \\(expected 0 to 3, or "
               "ignore_index -100\\) \\(on cuda:0");
}

TEST_F(HostBackendTest, OfTwoFaultsTheFirstIsReported) {
  const Tensor w = Zeros({5, 2}, Options(DType::kFloat32).set_device(kCuda));
  const Tensor e = ops::Embedding(w, CopyToDevice(FromVector<int64_t>({-1}), kCuda));
  const Tensor x = ops::IndexSelect(w, 1, CopyToDevice(FromVector<int64_t>({2}), kCuda));
  EXPECT_DEATH(ToVector<float>(x), "embedding: index -1 is out of range for dim 0 of size 5");
}

TEST_F(HostBackendTest, CrossEntropyMeanCountsTheTargetsNotIgnoredOnTheDevice) {
  Generator gen(5);
  const Tensor logits = Randn({4, 3}, {}, &gen);
  const Tensor target = FromVector<int64_t>({2, -100, 0, -100});
  const double cpu = ops::CrossEntropy(logits, target).item();
  const int64_t waits = backend_.launches("Sync");
  const Tensor loss = ops::CrossEntropy(CopyToDevice(logits, kCuda), CopyToDevice(target, kCuda));
  EXPECT_EQ(backend_.launches("Sync"), waits);
  EXPECT_NEAR(loss.item(), cpu, 1e-6);
  // Every target ignored: 0 / 0, as PyTorch gives.
  const Tensor none = CopyToDevice(FromVector<int64_t>({-100, -100, -100, -100}), kCuda);
  EXPECT_TRUE(std::isnan(ops::CrossEntropy(CopyToDevice(logits, kCuda), none).item()));
}

TEST_F(HostBackendTest, IndexingADimOfSizeZeroFailsAtOnce) {
  const Tensor w = Zeros({0, 2}, Options(DType::kFloat32).set_device(kCuda));
  const Tensor ids = CopyToDevice(FromVector<int64_t>({0}), kCuda);
  EXPECT_DEATH(ops::Embedding(w, ids),
               "embedding: dim 0 has size 0, so none of 1 indices is in range");
}

TEST_F(HostBackendTest, MoveToDeviceKeepsHandlesAndMovesTheGradient) {
  Tensor p = Ones({3, 4}).set_requires_grad(true);
  p.set_grad(Full({3, 4}, 2));
  Tensor alias = p;  // another handle to the same tensor, as an optimizer holds
  MoveToDevice(p, kCuda);
  EXPECT_TRUE(alias.device().is_cuda());
  EXPECT_TRUE(alias.grad().device().is_cuda());
  EXPECT_EQ(ToVector<float>(alias), std::vector<float>(12, 1));
  EXPECT_EQ(ToVector<float>(alias.grad()), std::vector<float>(12, 2));
  MoveToDevice(alias, Device::Cpu());
  EXPECT_TRUE(p.device().is_cpu());
}

TEST_F(HostBackendTest, ModuleToMovesTiedWeightsOnceAndOptimizerHandlesFollow) {
  Generator gen(3);
  auto model = std::make_shared<nn::Gpt>(nn::GptConfig{11, 8, 1, 2, 8, 0, true}, &gen);
  auto opt = optim::AdamW::Create(model->NamedParameters(), {});
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE(model->To(kCuda).ok());
  for (const auto& [name, t] : model->StateDict()) EXPECT_TRUE(t.device().is_cuda()) << name;
  for (const auto& [name, t] : (*opt)->params()) EXPECT_TRUE(t.device().is_cuda()) << name;
  Tensor wte, head;
  for (const auto& [name, t] : model->StateDict()) {
    if (name == "transformer.wte.weight") wte = t;
    if (name == "lm_head.weight") head = t;
  }
  EXPECT_EQ(wte.impl(), head.impl());
}

TEST_F(HostBackendTest, ModuleToAnInvisibleDeviceMovesNothing) {
  nn::Linear linear(3, 2);
  const Status s = linear.To(Device::Cuda(2));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(linear.weight().device().is_cpu());
}

// ---- Which kernels an op launches ----

TEST_F(HostBackendTest, MatmulOverAFoldableBatchIsOneGemmAndABroadcastOneIsOnePerItem) {
  auto opts = Options(DType::kFloat32).set_device(kCuda);
  ops::Matmul(Ones({3, 7, 13}, opts), Ones({3, 13, 5}, opts));
  EXPECT_EQ(backend_.launches("Gemm"), 1);
  ops::Matmul(Ones({2, 1, 7, 13}, opts), Ones({3, 13, 5}, opts));
  EXPECT_EQ(backend_.launches("Gemm"), 1 + 6);
}

TEST_F(HostBackendTest, LinearAddsTheBiasInTheGemmEpilogue) {
  auto opts = Options(DType::kFloat32).set_device(kCuda);
  Tensor y = ops::Linear(Ones({4, 3}, opts), Ones({5, 3}, opts), Full({5}, 0.5, opts));
  EXPECT_EQ(backend_.launches("Gemm"), 1);
  EXPECT_EQ(backend_.launches("Binary"), 0);
  EXPECT_EQ(ToVector<float>(y), std::vector<float>(20, 3.5));
}

TEST_F(HostBackendTest, AttentionWithoutAMaskRunsTheFusedKernelAndWithAMaskComposes) {
  auto opts = Options(DType::kFloat32).set_device(kCuda);
  Tensor q = Ones({2, 5, 8}, opts);
  ops::ScaledDotProductAttention(q, q, q, /*is_causal=*/true);
  EXPECT_EQ(backend_.launches("AttentionForward"), 1);
  ops::ScaledDotProductAttention(q, q, q, false, Ones({5, 5}, opts));
  EXPECT_EQ(backend_.launches("AttentionForward"), 1);
  EXPECT_EQ(backend_.launches("SoftmaxForward"), 1);
}

TEST(HostBackendDevicesTest, AnOpOnTheSecondDeviceMakesItCurrentOnItsThread) {
  HostBackend backend(HostBackendOptions{2});
  ScopedBackend scope(&backend);
  // HostBackend checks that a kernel on cuda:1's stream runs with cuda:1 current, as the
  // library's handles and workspaces need; a new thread starts on cuda:0.
  std::thread([] {
    const auto on1 = Options(DType::kFloat32).set_device(Device::Cuda(1));
    const Tensor x = Full({2, 3}, 2, on1);
    EXPECT_EQ(ToVector<float>(ops::Mul(x, x)), std::vector<float>(6, 4));
    const Tensor y = Full({2, 3}, 1, Options(DType::kFloat32).set_device(kCuda));
    EXPECT_EQ(ops::Sum(y).item(), 6);
  }).join();
}

TEST(HostBackendAttentionTest, AHeadSizeTheDeviceCannotFitComposesInstead) {
  HostBackend backend(HostBackendOptions{1, SIZE_MAX, /*attention_max_head=*/32});
  ScopedBackend scope(&backend);
  auto opts = Options(DType::kFloat32).set_device(kCuda);
  ops::ScaledDotProductAttention(Ones({2, 5, 32}, opts), Ones({2, 5, 32}, opts),
                                 Ones({2, 5, 32}, opts), true);
  EXPECT_EQ(backend.launches("AttentionForward"), 1);
  const Tensor q = Ones({2, 5, 64}, opts);
  const Tensor out = ops::ScaledDotProductAttention(q, q, q, true);
  EXPECT_EQ(backend.launches("AttentionForward"), 1);
  EXPECT_EQ(backend.launches("SoftmaxForward"), 1);
  EXPECT_EQ(ToVector<float>(out), std::vector<float>(2 * 5 * 64, 1));
}

TEST_F(HostBackendTest, AdamUpdatesEveryCudaParameterInOneLaunchPerStep) {
  auto opts = Options(DType::kFloat32).set_device(kCuda);
  Tensor a = Ones({3}, opts).set_requires_grad(true), b = Ones({4}, opts).set_requires_grad(true);
  auto opt = optim::Adam::Create({{"a", a}, {"b", b}}, {});
  ASSERT_TRUE(opt.ok());
  a.set_grad(Ones({3}, opts));
  b.set_grad(Ones({4}, opts));
  (*opt)->Step();
  EXPECT_EQ(backend_.launches("AdamMulti"), 1);
  EXPECT_NEAR(ToVector<float>(a)[0], 1 - 1e-3, 1e-7);
}

// As PyTorch's _amp_foreach_non_finite_check_and_unscale_: the f32 gradients of CUDA parameters
// are unscaled and checked in one launch and one read; others (here bf16) take an op each.
TEST_F(HostBackendTest, TheLossScalerUnscalesCudaF32GradientsInOneLaunch) {
  auto opts = Options(DType::kFloat32).set_device(kCuda);
  Tensor a = Zeros({3}, opts).set_requires_grad(true), b = Zeros({2}, opts).set_requires_grad(true);
  Tensor c = Zeros({2}, opts.set_dtype(DType::kBFloat16)).set_requires_grad(true);
  optim::GradScalerOptions o;
  o.init_scale = 4;
  auto scaler = optim::GradScaler::Create(o);
  ASSERT_TRUE(scaler.ok());
  a.set_grad(CopyToDevice(FromVector<float>({4, 8, -2}), kCuda));
  b.set_grad(CopyToDevice(FromVector<float>({1, 0}), kCuda));
  c.set_grad(CopyToDevice(ConvertTo(FromVector<float>({8, 4}), DType::kBFloat16), kCuda));
  const int64_t reads = backend_.launches("Memcpy.to_host");
  EXPECT_FALSE((*scaler)->UnscaleAndCheck({a, b, c}));
  EXPECT_EQ(backend_.launches("UnscaleCheck"), 1);
  EXPECT_EQ(backend_.launches("Memcpy.to_host"), reads + 2);  // the flag, and the bf16 check
  EXPECT_EQ(ToVector<float>(a.grad()), std::vector<float>({1, 2, -0.5}));
  EXPECT_EQ(ToVector<float>(b.grad()), std::vector<float>({0.25, 0}));
  EXPECT_EQ(ToVector<float>(ConvertTo(c.grad(), DType::kFloat32)), std::vector<float>({2, 1}));
  (*scaler)->Update(false);
  b.set_grad(CopyToDevice(FromVector<float>({1, std::numeric_limits<float>::infinity()}), kCuda));
  EXPECT_TRUE((*scaler)->UnscaleAndCheck({a, b}));
}

// As torch.nn.utils.clip_grad_norm_: the norm and the clip factor stay on the device, so the
// host need not wait for backward before it queues the optimizer.
TEST_F(HostBackendTest, ClipGradNormQueuesEverythingAndTheHostReadsTheNormLater) {
  auto opts = Options(DType::kFloat32).set_device(kCuda);
  Tensor a = Zeros({2}, opts).set_requires_grad(true);
  Tensor b = Zeros({2}, opts.set_dtype(DType::kBFloat16)).set_requires_grad(true);
  a.set_grad(CopyToDevice(FromVector<float>({3, 0}), kCuda));
  b.set_grad(CopyToDevice(ConvertTo(FromVector<float>({0, 4}), DType::kBFloat16), kCuda));
  const int64_t reads = backend_.launches("Memcpy.to_host"), syncs = backend_.launches("Sync");
  const Tensor total = optim::ClipGradNorm({a, b}, 2.5);
  EXPECT_EQ(backend_.launches("Memcpy.to_host"), reads);
  EXPECT_EQ(backend_.launches("Sync"), syncs);
  EXPECT_TRUE(total.device().is_cuda());
  EXPECT_EQ(total.item(), 5.0);
  EXPECT_NEAR(ToVector<float>(a.grad())[0], 1.5, 1e-6);
  EXPECT_NEAR(ToVector<float>(ConvertTo(b.grad(), DType::kFloat32))[1], 2.0, 1e-2);
}

// Under autocast the loss reads bf16 logits on the device as they are (no f32 copy); the loss
// and the logits' gradient equal those through the f32 copy bit for bit.
TEST_F(HostBackendTest, AutocastCrossEntropyReadsBf16LogitsAsThroughAnF32Copy) {
  Generator gen(5);
  const Tensor host = Randn({6, 11}, Options(DType::kFloat32), &gen);
  Tensor logits = CopyToDevice(ConvertTo(host, DType::kBFloat16), kCuda).set_requires_grad(true);
  const Tensor target = CopyToDevice(FromVector<int64_t>({0, 3, 10, 2, 2, 7}), kCuda);
  const int64_t copies = backend_.launches("Copy");
  Tensor direct;
  {
    AutocastGuard autocast(DType::kBFloat16);
    direct = ops::CrossEntropy(logits, target);
  }
  EXPECT_EQ(backend_.launches("Copy") - copies, 1) << "only the targets' count";
  EXPECT_EQ(direct.dtype(), DType::kFloat32);
  ASSERT_TRUE(autograd::Backward(direct).ok());
  const Tensor direct_grad = logits.grad();
  logits.set_grad(Tensor());
  const Tensor through_f32 = ops::CrossEntropy(ops::To(logits, DType::kFloat32), target);
  ASSERT_TRUE(autograd::Backward(through_f32).ok());
  EXPECT_EQ(direct.item(), through_f32.item());
  EXPECT_EQ(direct_grad.dtype(), DType::kBFloat16);
  EXPECT_EQ(ToVector<float>(ConvertTo(direct_grad, DType::kFloat32)),
            ToVector<float>(ConvertTo(logits.grad(), DType::kFloat32)));
}

// An f32 residual plus a bf16 branch, as autocast makes them: the bf16 operand is read as it
// is, and the sum and both gradients equal those through an f32 copy of it, bit for bit.
TEST_F(HostBackendTest, AnAddOfF32AndBf16ReadsTheBf16AsItIsAndEqualsTheCopy) {
  Generator gen(9);
  auto input = [&](const Shape& shape, DType dtype) {
    const Tensor host = ConvertTo(Randn(shape, Options(DType::kFloat32), &gen), dtype);
    return CopyToDevice(host, kCuda).set_requires_grad(true);
  };
  Tensor x = input({5, 9}, DType::kFloat32), y = input({9}, DType::kBFloat16);
  const int64_t copies = backend_.launches("Copy");
  const Tensor direct = ops::Add(x, y, 0.5);
  EXPECT_EQ(backend_.launches("Copy"), copies);
  EXPECT_EQ(direct.dtype(), DType::kFloat32);
  ASSERT_TRUE(autograd::Backward(ops::Sum(ops::Mul(direct, direct))).ok());
  const Tensor gx = x.grad(), gy = y.grad();
  EXPECT_EQ(gy.dtype(), DType::kBFloat16);
  x.set_grad(Tensor());
  y.set_grad(Tensor());
  const Tensor copied = ops::Add(x, ops::To(y, DType::kFloat32), 0.5);
  ASSERT_TRUE(autograd::Backward(ops::Sum(ops::Mul(copied, copied))).ok());
  EXPECT_EQ(ToVector<float>(direct), ToVector<float>(copied));
  EXPECT_EQ(ToVector<float>(gx), ToVector<float>(x.grad()));
  EXPECT_EQ(ToVector<float>(ConvertTo(gy, DType::kFloat32)),
            ToVector<float>(ConvertTo(y.grad(), DType::kFloat32)));
}

// Note [Padded rows]: a wide linear output off 16-byte rows has its rows padded on the device,
// and the loss reads them where they lie: no copy between the head and the loss, either way.
TEST_F(HostBackendTest, AWideHeadPadsItsRowsAndTheLossReadsThemInPlace) {
  Generator gen(3);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Tensor x = CopyToDevice(ConvertTo(Randn({4, 16}, {}, &gen), dtype), kCuda);
    Tensor w = CopyToDevice(ConvertTo(Randn({1029, 16}, {}, &gen), dtype), kCuda);
    w.set_requires_grad(true);
    const Tensor target = CopyToDevice(FromVector<int64_t>({0, 1028, 7, 500}), kCuda);
    const int64_t copies = backend_.launches("Copy");
    const Tensor logits = ops::Linear(x, w);
    EXPECT_EQ(logits.stride(0), 1032) << DTypeName(dtype);  // 16 bytes hold 4 f32 or 8 bf16
    EXPECT_EQ(logits.stride(1), 1);
    const Tensor loss = ops::CrossEntropy(logits, target);
    ASSERT_TRUE(autograd::Backward(loss).ok());
    // Only the loss's own: its count of targets and its gradient spread over the rows.
    EXPECT_EQ(backend_.launches("Copy") - copies, 2) << DTypeName(dtype);
    const Tensor cpu_w =
        ConvertTo(CopyToDevice(w.detach(), Device::Cpu()), DType::kFloat32).set_requires_grad(true);
    const Tensor cpu_x = ConvertTo(CopyToDevice(x, Device::Cpu()), DType::kFloat32);
    const Tensor cpu_loss =
        ops::CrossEntropy(ops::Linear(cpu_x, cpu_w), CopyToDevice(target, Device::Cpu()));
    ASSERT_TRUE(autograd::Backward(cpu_loss).ok());
    const double tol = dtype == DType::kFloat32 ? 1e-5 : 2e-2;
    EXPECT_NEAR(loss.item(), cpu_loss.item(), tol * cpu_loss.item());
    EXPECT_LE(RelativeError(ConvertTo(CopyToDevice(w.grad(), Device::Cpu()), DType::kFloat32),
                            cpu_w.grad()),
              tol);
  }
}

// Rows further apart than a padded head's (here every other row of one) are copied for the
// loss, so that its gradient is as compact as the rows it has.
TEST_F(HostBackendTest, TheLossCopiesLogitsWhoseRowsLieFarApart) {
  Generator gen(4);
  Tensor w = CopyToDevice(Randn({1029, 16}, {}, &gen), kCuda).set_requires_grad(true);
  const Tensor x = CopyToDevice(Randn({4, 2, 16}, {}, &gen), kCuda);
  const Tensor target = CopyToDevice(FromVector<int64_t>({0, 1028, 7, 500}), kCuda);
  const Tensor logits = ops::Select(ops::Linear(x, w), 1, 1);  // rows 2 x 1032 apart
  const int64_t copies = backend_.launches("Copy");
  const Tensor loss = ops::CrossEntropy(logits, target);
  EXPECT_EQ(backend_.launches("Copy") - copies, 2) << "the logits and the count of targets";
  ASSERT_TRUE(autograd::Backward(loss).ok());
  const Tensor cpu_w = CopyToDevice(w.detach(), Device::Cpu()).set_requires_grad(true);
  const Tensor cpu_loss =
      ops::CrossEntropy(ops::Select(ops::Linear(CopyToDevice(x, Device::Cpu()), cpu_w), 1, 1),
                        CopyToDevice(target, Device::Cpu()));
  ASSERT_TRUE(autograd::Backward(cpu_loss).ok());
  EXPECT_NEAR(loss.item(), cpu_loss.item(), 1e-5 * cpu_loss.item());
  EXPECT_LE(RelativeError(CopyToDevice(w.grad(), Device::Cpu()), cpu_w.grad()), 1e-5);
}

// ---- Device memory ----

TEST(HostBackendMemoryTest, OutOfDeviceMemoryIsResourceExhaustedNamingTheSizes) {
  HostBackend small(HostBackendOptions{1, 1 << 20});
  {
    ScopedBackend scope(&small);
    Tensor held = Empty({1 << 17}, Options(DType::kFloat32).set_device(kCuda));  // 512 KiB
    StatusOr<void*> p = CudaAllocator(0).Allocate(1 << 20, ComputeStream(kCuda));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
    EXPECT_THAT(p.status().message(), HasSubstr("cuda:0: out of memory allocating 1.0 MiB"));
    EXPECT_THAT(p.status().message(), HasSubstr("0.5 MiB allocated by tensors"));
    EXPECT_EQ(small.allocated_bytes(0), size_t{1} << 19);
  }
  EXPECT_EQ(small.allocated_bytes(0), 0u) << "dropping the allocator returns its cache";
}

}  // namespace
}  // namespace trainyard::testing
