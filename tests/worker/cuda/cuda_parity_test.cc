// CPU-vs-CUDA parity on a real GPU through libtrainyard_cuda.so: every op case of op_cases.h
// in f32 and, where the op supports it, bf16 and f16, and a tiny GPT's training steps. Every
// test skips itself, saying why, where the library cannot be loaded or no GPU is visible.
//
// The library is found through $TRAINYARD_CUDA_LIB, which defaults to the build's own
// (TY_CUDA_LIB, set by tests/CMakeLists.txt when the build makes it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>

#include "tests/worker/cuda/op_cases.h"
#include "worker/ops/indexing.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"

namespace trainyard::testing {
namespace {

const Device kCuda = Device::Cuda(0);

// Why CUDA tests cannot run here, or "" when they can.
std::string WhyNoGpu() {
#ifdef TY_CUDA_LIB
  setenv(kernels::cuda::kCudaLibraryEnv, TY_CUDA_LIB, /*overwrite=*/0);
#endif
  StatusOr<cuda::Backend*> backend = LoadCudaBackend();
  if (!backend.ok()) return "the CUDA backend cannot be loaded: " + backend.status().message();
  if ((*backend)->DeviceCount() == 0) return "the CUDA backend loaded but sees no GPU";
  return "";
}

class CudaParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = WhyNoGpu();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// Relative tolerances (of an element and of the tensor's largest magnitude): f32 kernels
// reorder sums (1e-4), TF32 tensor cores keep 10 mantissa bits (2e-3), 16-bit storage rounds
// every op's output (bf16 8 bits, f16 11).
double Tolerance(DType dtype, bool gemm) {
  switch (dtype) {
    case DType::kBFloat16:
      return 2e-2;
    case DType::kFloat16:
      return 5e-3;
    default:
      return gemm ? 2e-3 : 1e-4;
  }
}

class CudaParityOpTest : public CudaParityTest, public ::testing::WithParamInterface<OpParam> {};

TEST_P(CudaParityOpTest, MatchesTheCpuReference) {
  const OpParam& p = GetParam();
  SCOPED_TRACE(::testing::Message()
               << "case " << p.name << ", dtype " << DTypeName(p.dtype) << ", seed " << p.seed);
  RecordProperty("seed", std::to_string(p.seed));
  const OpCase& c = FindCase(p.name);
  CaseResult want = RunCase(c, Device::Cpu(), p.dtype, p.seed);
  CaseResult got = RunCase(c, kCuda, p.dtype, p.seed);
  EXPECT_EQ(CompareResults(got, want, Tolerance(p.dtype, p.gemm)), "");
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaParityOpTest, ::testing::ValuesIn(AllOpParams(9001)),
                         [](const auto& info) { return OpParamName(info.param); });

TEST_F(CudaParityTest, GemmBiasAndGeluEpiloguesMatchTheCpu) {
  EXPECT_EQ(CompareGemmEpilogues(kCuda), "");
}

TEST_F(CudaParityTest, DeviceReportsItsProperties) {
  cuda::DeviceProperties props;
  ASSERT_TRUE(CudaBackend().Properties(0, &props).ok());
  EXPECT_FALSE(props.name.empty());
  EXPECT_GE(props.major, 7);
  EXPECT_GT(props.total_memory, 0);
  std::printf("cuda:0 is %s (sm_%d%d, %lld MiB)\n", props.name.c_str(), props.major, props.minor,
              static_cast<long long>(props.total_memory >> 20));
}

// Note [Deferred index checks] on a real device: the check kernel writes the fault into
// page-locked host memory through unified addressing, and the next wait reports it.
TEST_F(CudaParityTest, AnOutOfRangeTokenIdIsReportedAtTheNextWait) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts CUDA afresh
  EXPECT_DEATH(
      {
        const Tensor w = Zeros({5, 2}, Options(DType::kFloat32).set_device(kCuda));
        const Tensor ids = CopyToDevice(FromVector<int64_t>({1, 9, 2}), kCuda);
        ToVector<float>(ops::Embedding(w, ids));
      },
      "embedding: index 9 is out of range for dim 0 of size 5 \\(on cuda:0");
}

// Three AdamW steps: the losses within TF32's tolerance; the parameters, which Adam's
// normalisation moves by lr-sized steps for small gradients, within 1e-2 of their scale.
void ExpectGptTrainsAsOnTheCpu(double dropout, int64_t vocab = 11) {
  EXPECT_EQ(CompareTinyGptTraining(kCuda, dropout, vocab, 2e-3, 1e-2), "")
      << "dropout " << dropout << ", vocabulary " << vocab;
}

TEST_F(CudaParityTest, TinyGptTrainingStepsMatchTheCpu) { ExpectGptTrainsAsOnTheCpu(0); }

TEST_F(CudaParityTest, TinyGptWithDropoutTrainingStepsMatchTheCpu) {
  ExpectGptTrainsAsOnTheCpu(0.1);
}

TEST_F(CudaParityTest, TinyGptWithAPaddedHeadTrainingStepsMatchTheCpu) {
  ExpectGptTrainsAsOnTheCpu(0, 1029);
}

}  // namespace
}  // namespace trainyard::testing
