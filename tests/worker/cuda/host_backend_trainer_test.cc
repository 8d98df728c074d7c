// The trainer on a "cuda" device backed by host memory (tests/testing/host_backend.h): the
// model, the optimizer state and every batch go to the device (the batch through DeviceCopier),
// autocast runs the products in real bf16 tensors there, fp16 scales its loss, and checkpoints
// written from device tensors resume on the CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/json.h"
#include "kernels/cpu/parallel.h"
#include "tests/testing/dist.h"
#include "tests/testing/host_backend.h"
#include "tests/testing/host_staged_group.h"
#include "tests/testing/temp_dir.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

using ::trainyard::trainer::testing::ParseSpec;

using ::testing::HasSubstr;

class HostBackendTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernels::cpu::SetNumThreads(2);
    SetCudaBackendForTesting(&backend_);
    text_ = dir_.path() + "/corpus.txt";
    testing::WriteGptCorpus(text_);
  }
  void TearDown() override { SetCudaBackendForTesting(nullptr); }

  // A tiny GPT with dropout and AdamW, as in the trainer tests.
  spec::JobSpec GptSpec(const std::string& extra, int64_t steps = 6) {
    return testing::DeviceGptSpec(text_, extra, steps);
  }

  std::vector<StepMetrics> Run(const spec::JobSpec& spec, TrainSummary* summary = nullptr) {
    return testing::TrainToEnd(spec, summary);
  }

  ::trainyard::testing::HostBackend backend_;
  ::trainyard::testing::TempDir dir_;
  std::string text_;
};

TEST_F(HostBackendTrainerTest, StepsReportTheDevicesTensorMemory) {
  std::vector<StepMetrics> steps;
  std::vector<size_t> device_bytes;  // what the device had handed out, at each step's report
  TrainerOptions options;
  options.on_step = [&](const StepMetrics& m) {
    steps.push_back(m);
    device_bytes.push_back(backend_.allocated_bytes(0));
  };
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(GptSpec(R"(, "device": "cuda")", 3), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ(steps.size(), 3u);
  for (size_t i = 0; i < steps.size(); ++i) {
    // The caching allocator's reserve is all the device memory the engine holds.
    EXPECT_EQ(steps[i].memory.reserved_bytes, static_cast<int64_t>(device_bytes[i]));
    EXPECT_GT(steps[i].memory.allocated_bytes, 0);
    EXPECT_GE(steps[i].memory.peak_allocated_bytes, steps[i].memory.allocated_bytes);
    EXPECT_LE(steps[i].memory.peak_allocated_bytes, steps[i].memory.reserved_bytes);
  }
}

TEST_F(HostBackendTrainerTest, AGptTrainsOnCudaWithTheLossesOfTheCpu) {
  const std::vector<StepMetrics> cpu = Run(GptSpec(""));
  const int64_t launches_before = backend_.kernel_launches();
  const std::vector<StepMetrics> gpu = Run(GptSpec(R"(, "device": "cuda")"));
  ASSERT_EQ(cpu.size(), 6u);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i].loss, cpu[i].loss, 1e-4 * cpu[i].loss) << "step " << i + 1;
    EXPECT_NEAR(gpu[i].grad_norm, cpu[i].grad_norm, 1e-3 * cpu[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_GT(backend_.kernel_launches() - launches_before, 100);
  EXPECT_GT(backend_.launches("AdamMulti"), 0) << "AdamW steps the device parameters at once";
}

TEST_F(HostBackendTrainerTest, Bf16OnCudaRunsTheProductsInBf16AndTrains) {
  const std::vector<StepMetrics> fp32 = Run(GptSpec(R"(, "device": "cuda")"));
  const std::vector<StepMetrics> bf16 =
      Run(GptSpec(R"(, "device": "cuda", "precision": "bf16")", 12));
  ASSERT_EQ(bf16.size(), 12u);
  EXPECT_NE(bf16[0].loss, fp32[0].loss) << "bf16 products round";
  EXPECT_NEAR(bf16[0].loss, fp32[0].loss, 2e-2 * fp32[0].loss);
  EXPECT_LT(bf16.back().loss, bf16.front().loss);
  EXPECT_GT(backend_.launches("Gemm.bf16"), 0) << "the matrix products ran on bf16 tensors";
}

TEST_F(HostBackendTrainerTest, Fp16OnCudaScalesTheLossAndTrains) {
  TrainSummary summary;
  const std::vector<StepMetrics> steps =
      Run(GptSpec(R"(, "device": "cuda", "precision": "fp16")", 12), &summary);
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_EQ(steps[0].loss_scale, 65536);
  EXPECT_TRUE(std::isfinite(steps.back().loss));
  EXPECT_LT(steps.back().loss, steps.front().loss);
}

// On a device the host waits for a step once, to read its loss after the update: forward,
// backward, clipping and the optimizer only queue work. The clipped norm is read with the loss.
TEST_F(HostBackendTrainerTest, AStepReadsNothingButItsLossAndNormFromTheDevice) {
  auto reads = [&](int64_t steps, const std::string& clip) {
    const spec::JobSpec spec = ParseSpec(
        R"({"model": {"gpt": {"context": 16, "n_layer": 1, "n_head": 2, "n_embd": 16}},
            "data": {"text": {"path": ")" +
        text_ + R"("}}, "optimizer": {"adamw": {"lr": 0.01}}, "batch_size": 4, "steps": )" +
        std::to_string(steps) + R"(, "seed": 3, "device": "cuda",
            "parallelism": {"grad_accumulation_steps": 2}, "eval": {"max_batches": 2})" +
        clip + "}");
    const int64_t before = backend_.launches("Memcpy.to_host");
    const std::vector<StepMetrics> metrics = Run(spec);
    EXPECT_EQ(metrics.size(), static_cast<size_t>(steps));
    for (const StepMetrics& m : metrics) {
      EXPECT_GT(m.forward_seconds, 0);
      EXPECT_GT(m.backward_seconds, 0);
      EXPECT_GT(m.optimizer_seconds, 0);
      EXPECT_EQ(std::isnan(m.grad_norm), clip.empty()) << m.grad_norm;
      if (!clip.empty()) {
        EXPECT_GT(m.grad_norm, 0);
      }
    }
    return backend_.launches("Memcpy.to_host") - before;
  };
  EXPECT_EQ(reads(6, "") - reads(3, ""), 3) << "reads per step beyond the loss's one";
  const std::string clip = R"(, "grad_clip_norm": 0.5)";
  EXPECT_EQ(reads(6, clip) - reads(3, clip), 6) << "reads per step: the loss and the norm";
}

TEST_F(HostBackendTrainerTest, ACheckpointOfACudaRunResumesOnTheCpuExactly) {
  const std::string ckpt = R"(, "checkpoint": {"dir": ")" + dir_.path() + R"(/ckpt"})";
  const std::vector<StepMetrics> whole = Run(GptSpec(R"(, "device": "cuda")"));
  // Three steps on the device, saved; the other three resumed on the CPU.
  const std::vector<StepMetrics> first = Run(GptSpec(R"(, "device": "cuda")" + ckpt, 3));
  const std::vector<StepMetrics> rest = Run(GptSpec(ckpt));
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0].step, 4);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(rest[i].loss, whole[3 + i].loss, 1e-4 * whole[3 + i].loss) << "step " << 4 + i;
  }
}

TEST_F(HostBackendTrainerTest, CudaOnAMachineWhoseBackendSeesNoDeviceIsRefusedNamingTheField) {
  ::trainyard::testing::HostBackendOptions none;
  none.device_count = 0;
  ::trainyard::testing::HostBackend empty(none);
  SetCudaBackendForTesting(&empty);
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(GptSpec(R"(, "device": "cuda")"));
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(trainer.status().message()), HasSubstr("device = \"cuda\""));
  EXPECT_THAT(std::string(trainer.status().message()), HasSubstr("no CUDA device"));
  SetCudaBackendForTesting(&backend_);
}

#ifdef TY_HAVE_GLOO
// Two data-parallel ranks on the device, as a job on two GPUs runs them: the gradients go
// through a group that stages device tensors through Gloo (NCCL's part), so the reducer buckets
// the device's parameters, every rank reports the same loss and the weights stay equal.
TEST_F(HostBackendTrainerTest, TwoDataParallelRanksTrainOnTheDeviceAndStayEqual) {
  const spec::JobSpec spec = GptSpec(R"(, "device": "cuda", "parallelism": {"world_size": 2})", 4);
  std::vector<double> losses[2];
  std::vector<float> weights[2];
  ::trainyard::testing::RunRanks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> gloo) {
    TrainerOptions options;
    options.process_group = std::make_shared<::trainyard::testing::HostStagedGroup>(gloo);
    options.on_step = [&, rank](const StepMetrics& m) { losses[rank].push_back(m.loss); };
    StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    StatusOr<TrainSummary> result = (*trainer)->Run();
    ASSERT_TRUE(result.ok()) << result.status();
    const Tensor w = (*trainer)->model().NamedParameters().front().second;
    EXPECT_TRUE(w.device().is_cuda());
    weights[rank] = ToVector<float>(w);
  });
  ASSERT_EQ(losses[0].size(), 4u);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_LT(losses[0].back(), losses[0].front());
}
#endif  // TY_HAVE_GLOO

}  // namespace
}  // namespace trainyard::trainer
