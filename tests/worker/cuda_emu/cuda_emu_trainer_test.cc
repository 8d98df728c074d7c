// The trainer on the emulated CUDA backend (tests/testing/cuda_emu/emu_backend.h): a tiny GPT
// with dropout, clipping and AdamW trains through the library's own kernels, its batches coming
// through the device copier, with the CPU's losses in fp32, and in bf16 and fp16 (the loss
// scaler's unscale kernel) it learns. host_backend_trainer_test.cc runs the same on HostBackend.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "tests/testing/cuda_emu/emu_backend.h"
#include "tests/testing/temp_dir.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

using ::trainyard::trainer::testing::ParseSpec;

class CudaEmuTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernels::cpu::SetNumThreads(2);
    SetCudaBackendForTesting(::trainyard::testing::EmulatedCudaBackend());
    text_ = dir_.path() + "/corpus.txt";
    testing::WriteGptCorpus(text_);
  }
  void TearDown() override { SetCudaBackendForTesting(nullptr); }

  spec::JobSpec GptSpec(const std::string& extra, int64_t steps) {
    return testing::DeviceGptSpec(text_, extra, steps);
  }

  std::vector<StepMetrics> Run(const spec::JobSpec& spec) { return testing::TrainToEnd(spec); }

  ::trainyard::testing::TempDir dir_;
  std::string text_;
};

TEST_F(CudaEmuTrainerTest, AGptTrainsWithTheLossesOfTheCpu) {
  const std::vector<StepMetrics> cpu = Run(GptSpec("", 4));
  const std::vector<StepMetrics> gpu = Run(GptSpec(R"(, "device": "cuda")", 4));
  ASSERT_EQ(cpu.size(), 4u);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i].loss, cpu[i].loss, 1e-4 * cpu[i].loss) << "step " << i + 1;
    EXPECT_NEAR(gpu[i].grad_norm, cpu[i].grad_norm, 1e-3 * cpu[i].grad_norm) << "step " << i + 1;
  }
}

TEST_F(CudaEmuTrainerTest, Bf16AndFp16Learn) {
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    const std::vector<StepMetrics> steps =
        Run(GptSpec(std::string(R"(, "device": "cuda", "precision": ")") + precision + "\"", 10));
    ASSERT_EQ(steps.size(), 10u);
    EXPECT_TRUE(std::isfinite(steps.back().loss));
    EXPECT_LT(steps.back().loss, steps.front().loss);
  }
}

}  // namespace
}  // namespace trainyard::trainer
