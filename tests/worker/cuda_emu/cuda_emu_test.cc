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

struct OpParam {
  std::string name;
  DType dtype;
  uint64_t seed;
};

std::vector<OpParam> AllOpParams() {
  std::vector<OpParam> params;
  uint64_t seed = 5001;
  for (const OpCase& c : OpCases()) {
    params.push_back({c.name, DType::kFloat32, seed});
    if (c.half) {
      params.push_back({c.name, DType::kBFloat16, seed});
      params.push_back({c.name, DType::kFloat16, seed});
    }
    ++seed;
  }
  return params;
}

void PrintTo(const OpParam& p, std::ostream* os) {
  *os << p.name << " in " << DTypeName(p.dtype) << ", seed " << p.seed;
}

std::string ParamName(const ::testing::TestParamInfo<OpParam>& info) {
  return info.param.name + "_" + DTypeName(info.param.dtype);
}

// Relative tolerances against the CPU: the kernels order sums differently from the CPU's and
// use the device's formulas (f32: 1e-4); 16-bit storage rounds every op's output. The products
// are HostBackend's (no TF32 here), so GEMM cases need no looser bound.
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

INSTANTIATE_TEST_SUITE_P(Ops, CudaEmuOpTest, ::testing::ValuesIn(AllOpParams()), ParamName);

TEST_F(CudaEmuTest, GemmBiasAndGeluEpiloguesMatchTheCpu) {
  EXPECT_EQ(CompareGemmEpilogues(kCuda), "");
}

// Note [Deferred index checks]: the check kernel records the rejected id in page-locked memory
// and the next wait reports it.
TEST_F(CudaEmuTest, AnOutOfRangeTokenIdIsReportedAtTheNextWait) {
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
  const uint64_t seed = 4242;
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", dropout " << dropout);
  CaseResult want = TrainTinyGpt(Device::Cpu(), dropout, 3, seed, vocab);
  CaseResult got = TrainTinyGpt(kCuda, dropout, 3, seed, vocab);
  ASSERT_EQ(got.size(), want.size());
  const CaseResult got_losses(got.begin(), got.begin() + 3),
      want_losses(want.begin(), want.begin() + 3);
  EXPECT_EQ(CompareResults(got_losses, want_losses, 1e-4), "");
  EXPECT_EQ(CompareResults(got, want, 1e-2), "");
}

TEST_F(CudaEmuTest, TinyGptTrainingStepsMatchTheCpu) { ExpectGptTrainsAsOnTheCpu(0); }

TEST_F(CudaEmuTest, TinyGptWithDropoutTrainingStepsMatchTheCpu) { ExpectGptTrainsAsOnTheCpu(0.1); }

TEST_F(CudaEmuTest, TinyGptWithAPaddedHeadTrainingStepsMatchTheCpu) {
  ExpectGptTrainsAsOnTheCpu(0, 1029);
}

}  // namespace
}  // namespace trainyard::testing
