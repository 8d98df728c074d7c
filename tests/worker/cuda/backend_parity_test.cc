// The parity suites of backend_parity.h, written once for every backend: each test runs on
// cuda:0 backed by the parameter's backend and compares with the CPU reference. The backends
// instantiate them (TY_PARITY_SUITES) in host_backend_test.cc, cuda_parity_test.cc and
// tests/worker/cuda_emu/cuda_emu_test.cc.
#include "tests/worker/cuda/backend_parity.h"

#include <cstdio>
#include <string>

#include "worker/ops/indexing.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"

namespace trainyard::testing {

double OpTolerance(const ParityBackend& backend, DType dtype, bool gemm) {
  switch (dtype) {
    case DType::kBFloat16:
      return 2e-2;
    case DType::kFloat16:
      return 5e-3;
    default:
      return backend.F32Tolerance(gemm);
  }
}

void PrintTo(const OpParityParam& p, std::ostream* os) {
  *os << p.backend->name() << ": ";
  PrintTo(p.op, os);
}

std::vector<OpParityParam> OpParityParams(ParityBackend* backend, uint64_t first_seed) {
  std::vector<OpParityParam> params;
  if (!backend->Present()) return params;
  for (const OpParam& op : AllOpParams(first_seed)) params.push_back({backend, op});
  return params;
}

std::string OpParityName(const ::testing::TestParamInfo<OpParityParam>& info) {
  return OpParamName(info.param.op);
}

std::string BackendParityName(const ::testing::TestParamInfo<ParityBackend*>&) { return "cuda0"; }

void PrintTo(ParityBackend* backend, std::ostream* os) { *os << backend->name(); }

void BackendParityTest::SetUp() {
  const std::string why = backend().WhyUnavailable();
  if (!why.empty()) GTEST_SKIP() << backend().name() << ": " << why;
  backend().Install();
  installed_ = true;
}

void BackendParityTest::TearDown() {
  if (installed_) backend().Uninstall();
}

void OpParityTest::SetUp() {
  const std::string why = backend().WhyUnavailable();
  if (!why.empty()) GTEST_SKIP() << backend().name() << ": " << why;
  backend().Install();
  installed_ = true;
}

void OpParityTest::TearDown() {
  if (installed_) backend().Uninstall();
}

namespace {

const Device kCuda = Device::Cuda(0);

// ---- Every op case, f32 and, where the op runs in 16 bits, bf16 and f16 ----

TEST_P(OpParityTest, MatchesTheCpuReference) {
  const OpParam& p = GetParam().op;
  SCOPED_TRACE(::testing::Message() << backend().name() << ": case " << p.name << ", dtype "
                                    << DTypeName(p.dtype) << ", seed " << p.seed);
  RecordProperty("seed", std::to_string(p.seed));
  const OpCase& c = FindCase(p.name);
  const std::optional<int64_t> before = backend().Launches("");
  const CaseResult want = RunCase(c, Device::Cpu(), p.dtype, p.seed);
  if (before) {
    EXPECT_EQ(*backend().Launches(""), *before) << "the CPU run launched a device kernel";
  }
  const CaseResult got = RunCase(c, kCuda, p.dtype, p.seed);
  if (before) {
    EXPECT_GT(*backend().Launches(""), *before) << "the case ran no device kernel";
  }
  EXPECT_EQ(CompareResults(got, want, OpTolerance(backend(), p.dtype, p.gemm)), "");
  for (const auto& [name, t] : got) {
    if (t.defined()) {
      EXPECT_TRUE(t.device().is_cpu()) << name;
    }
  }
}

// ---- The GEMM epilogues, the deferred index check, the device ----

TEST_P(BackendParityTest, GemmBiasAndGeluEpiloguesMatchTheCpu) {
  EXPECT_EQ(CompareGemmEpilogues(kCuda), "");
  if (const std::optional<int64_t> gemms = backend().Launches("Gemm")) {
    EXPECT_EQ(*gemms, 12) << "one product per epilogue, dtype and n";
  }
}

// Note [Deferred index checks]: the check kernel records the rejected id in page-locked memory
// (on a GPU through unified addressing) and the next wait reports it.
TEST_P(BackendParityTest, AnOutOfRangeTokenIdIsReportedAtTheNextWait) {
  // The child starts afresh: a forked one would lack CUDA's and the emulated streams' threads.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        const Tensor w = Zeros({5, 2}, Options(DType::kFloat32).set_device(kCuda));
        const Tensor ids = CopyToDevice(FromVector<int64_t>({1, 9, 2}), kCuda);
        ToVector<float>(ops::Embedding(w, ids));
      },
      "embedding: index 9 is out of range for dim 0 of size 5 \\(on cuda:0");
}

TEST_P(BackendParityTest, DeviceReportsItsProperties) {
  cuda::DeviceProperties props;
  ASSERT_TRUE(CudaBackend().Properties(0, &props).ok());
  EXPECT_FALSE(props.name.empty());
  EXPECT_GE(props.major, 7);
  EXPECT_GT(props.total_memory, 0);
  std::printf("%s cuda:0 is %s (sm_%d%d, %lld MiB)\n", backend().name().c_str(), props.name.c_str(),
              props.major, props.minor, static_cast<long long>(props.total_memory >> 20));
}

// ---- A whole model: three AdamW steps of a tiny GPT ----

// The losses within the backend's tolerance; the parameters, which Adam's normalisation moves
// by lr-sized steps for small gradients, within theirs.
void ExpectGptTrainsAsOnTheCpu(const ParityBackend& backend, double dropout, int64_t vocab = 11) {
  EXPECT_EQ(CompareTinyGptTraining(kCuda, dropout, vocab, backend.GptLossTolerance(),
                                   backend.GptParamTolerance()),
            "")
      << "dropout " << dropout << ", vocabulary " << vocab;
}

TEST_P(BackendParityTest, TinyGptTrainingStepsMatchTheCpu) {
  ExpectGptTrainsAsOnTheCpu(backend(), 0);
}

TEST_P(BackendParityTest, TinyLlamaTrainingStepsMatchTheCpu) {
  EXPECT_EQ(
      CompareTinyLlamaTraining(kCuda, backend().GptLossTolerance(), backend().GptParamTolerance()),
      "");
}

TEST_P(BackendParityTest, TinyGptWithDropoutTrainingStepsMatchTheCpu) {
  ExpectGptTrainsAsOnTheCpu(backend(), 0.1);
}

TEST_P(BackendParityTest, TinyGptWithAPaddedHeadTrainingStepsMatchTheCpu) {
  ExpectGptTrainsAsOnTheCpu(backend(), 0, 1029);
}

}  // namespace
}  // namespace trainyard::testing
