// The CUDA kernels of libtrainyard_cuda.so on machines without a GPU: every op case of
// op_cases.h, a tiny GPT's training steps and the GEMM epilogues on cuda:0 backed by the
// emulated backend (tests/testing/cuda_emu/emu_backend.h), whose elementwise, reduction,
// softmax, cross-entropy, layer norm, indexing, random, optimizer, pooling, batch norm and
// attention kernels are the library's own (kernels/cuda/*.cu), run thread by thread on the host,
// against the CPU reference. cuda_parity_test.cc runs the same cases on a real GPU.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "tests/testing/cuda_emu/emu_backend.h"
#include "tests/worker/cuda/op_cases.h"
#include "worker/ops/indexing.h"
#include "worker/tensor/cuda_backend.h"

namespace trainyard::testing {
namespace {

const Device kCuda = Device::Cuda(0);

class CudaEmuTest : public ::testing::Test {
 protected:
  void SetUp() override { SetCudaBackendForTesting(EmulatedCudaBackend()); }
  void TearDown() override { SetCudaBackendForTesting(nullptr); }
};

// Relative tolerances against the CPU: the kernels order sums differently from the CPU's and
// use the device's formulas (f32: 1e-4); 16-bit storage rounds every op's output. The products
// are the host cuBLASLt's (f32 sums, no TF32), so GEMM cases need no looser bound.
double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return 2e-2;
    case DType::kFloat16:
      return 5e-3;
    default:
      return 1e-4;
  }
}

class CudaEmuOpTest : public CudaEmuTest, public ::testing::WithParamInterface<OpParam> {};

TEST_P(CudaEmuOpTest, MatchesTheCpuReference) {
  const OpParam& p = GetParam();
  SCOPED_TRACE(::testing::Message()
               << "case " << p.name << ", dtype " << DTypeName(p.dtype) << ", seed " << p.seed);
  const OpCase& c = FindCase(p.name);
  CaseResult want = RunCase(c, Device::Cpu(), p.dtype, p.seed);
  CaseResult got = RunCase(c, kCuda, p.dtype, p.seed);
  EXPECT_EQ(CompareResults(got, want, Tolerance(p.dtype)), "");
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaEmuOpTest, ::testing::ValuesIn(AllOpParams(5001)),
                         [](const auto& info) { return OpParamName(info.param); });

TEST_F(CudaEmuTest, GemmBiasAndGeluEpiloguesMatchTheCpu) {
  EXPECT_EQ(CompareGemmEpilogues(kCuda), "");
}

// Note [Deferred index checks]: the check kernel records the rejected id in page-locked memory
// and the next wait reports it.
TEST_F(CudaEmuTest, AnOutOfRangeTokenIdIsReportedAtTheNextWait) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a forked child lacks the streams' threads
  EXPECT_DEATH(
      {
        const Tensor w = Zeros({5, 2}, Options(DType::kFloat32).set_device(kCuda));
        const Tensor ids = CopyToDevice(FromVector<int64_t>({1, 9, 2}), kCuda);
        ToVector<float>(ops::Embedding(w, ids));
      },
      "embedding: index 9 is out of range for dim 0 of size 5 \\(on cuda:0");
}

// Three AdamW steps, as cuda_parity_test.cc's.
void ExpectGptTrainsAsOnTheCpu(double dropout, int64_t vocab = 11) {
  EXPECT_EQ(CompareTinyGptTraining(kCuda, dropout, vocab, 1e-4, 1e-2), "")
      << "dropout " << dropout << ", vocabulary " << vocab;
}

TEST_F(CudaEmuTest, TinyGptTrainingStepsMatchTheCpu) { ExpectGptTrainsAsOnTheCpu(0); }

TEST_F(CudaEmuTest, TinyGptWithDropoutTrainingStepsMatchTheCpu) { ExpectGptTrainsAsOnTheCpu(0.1); }

TEST_F(CudaEmuTest, TinyGptWithAPaddedHeadTrainingStepsMatchTheCpu) {
  ExpectGptTrainsAsOnTheCpu(0, 1029);
}

}  // namespace
}  // namespace trainyard::testing
