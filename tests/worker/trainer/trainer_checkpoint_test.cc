// The trainer's checkpoints with checkpoint.async on and off (trainer_checkpoint.cc,
// Note [Asynchronous checkpoint]).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "common/clock.h"
#include "kernels/cpu/parallel.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

using ::testing::HasSubstr;
using testing::ReadRaw;
using testing::TempDir;

// What a run did: its losses, the checkpoints it reported and its result.
struct Outcome {
  std::vector<double> losses;
  std::vector<int64_t> reported;  // on_checkpoint's steps, in order
  StatusOr<TrainSummary> summary = InternalError("not run");
  std::string latest_at_return;  // Latest() of checkpoint.dir as Run returned
};

class TrainerCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernels::cpu::SetNumThreads(2);
    text_ = dir_.File("corpus.txt");
    testing::WriteGptCorpus(text_);
  }

  // The device trainer tests' tiny GPT for 12 steps, checkpointing every 4 into `name`.
  spec::JobSpec Spec(const std::string& name, bool async) {
    spec::JobSpec spec = testing::DeviceGptSpec(text_, "", 12);
    spec.checkpoint.dir = dir_.File(name);
    spec.checkpoint.every_steps = 4;
    spec.checkpoint.keep_last = 0;
    spec.checkpoint.async = async;
    return spec;
  }

  // Runs `spec`, stopped after step `stop_at` (-1: to the end), with a fake clock.
  Outcome Train(const spec::JobSpec& spec, int64_t stop_at = -1, int64_t attempt = 0) {
    Outcome out;
    std::atomic<bool> stop{false};
    TrainerOptions options;
    options.clock = &clock_;
    options.stop = &stop;
    options.attempt = attempt;
    options.on_step = [&](const StepMetrics& m) {
      out.losses.push_back(m.loss);
      if (m.step == stop_at) stop = true;
    };
    options.on_checkpoint = [&](const std::string&, int64_t step) { out.reported.push_back(step); };
    StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec, options);
    if (!trainer.ok()) {
      out.summary = trainer.status();
      return out;
    }
    if (attempt > 0) fence_hook_(spec.checkpoint.dir);
    out.summary = (*trainer)->Run();
    StatusOr<std::optional<std::string>> latest =
        CheckpointManager(spec.checkpoint.dir, 0).Latest();
    if (latest.ok() && latest->has_value()) out.latest_at_return = **latest;
    return out;
  }

  TempDir dir_;
  std::string text_;
  FakeClock clock_{1.7e9};
  std::function<void(const std::string&)> fence_hook_ = [](const std::string&) {};
};

// The files of a step directory: the weights byte for byte, and the manifest but for the spec
// (whose checkpoint.dir and checkpoint.async differ between the runs compared) and the run's
// uid (each `trainyard train` run makes its own).
void ExpectSameCheckpoint(const std::string& a, const std::string& b) {
  for (const char* file : {kModelFile, kOptimizerFile}) {
    const std::string bytes = ReadRaw(a + "/" + file);
    EXPECT_FALSE(bytes.empty()) << a << "/" << file;
    EXPECT_EQ(bytes, ReadRaw(b + "/" + file)) << file << " differs in " << a << " and " << b;
  }
  StatusOr<Manifest> x = ReadManifest(a + "/" + kManifestFile);
  StatusOr<Manifest> y = ReadManifest(b + "/" + kManifestFile);
  ASSERT_TRUE(x.ok() && y.ok());
  x->state.spec = y->state.spec = Json();
  x->state.run.uid = y->state.run.uid = "";
  EXPECT_EQ(ManifestToJson(*x).Dump(), ManifestToJson(*y).Dump());
}

TEST_F(TrainerCheckpointTest, AsyncAndSyncRunsWriteTheSameCheckpointsAndResumeAlike) {
  const std::vector<double> straight = Train(Spec("plain", true)).losses;
  ASSERT_EQ(straight.size(), 12u);
  for (const bool async : {true, false}) {
    SCOPED_TRACE(async ? "async" : "sync");
    const spec::JobSpec spec = Spec(async ? "async" : "sync", async);
    Outcome first = Train(spec, /*stop_at=*/6);
    ASSERT_TRUE(first.summary.ok()) << first.summary.status();
    EXPECT_TRUE(first.summary->interrupted);
    // The stop's checkpoint is committed, and reported, before Run returns.
    EXPECT_EQ(first.reported, (std::vector<int64_t>{4, 6}));
    EXPECT_EQ(first.latest_at_return, spec.checkpoint.dir + "/" + StepDirName(6));
    EXPECT_EQ(first.summary->checkpoint, first.latest_at_return);
    Outcome second = Train(spec);
    ASSERT_TRUE(second.summary.ok()) << second.summary.status();
    EXPECT_EQ(second.reported, (std::vector<int64_t>{8, 12}));
    std::vector<double> losses = first.losses;
    losses.insert(losses.end(), second.losses.begin(), second.losses.end());
    EXPECT_EQ(losses, straight);  // Note [Exact resume], bit for bit
  }
  for (const int64_t step : {4, 6, 8, 12}) {
    ExpectSameCheckpoint(dir_.File("async/" + StepDirName(step)),
                         dir_.File("sync/" + StepDirName(step)));
  }
}

TEST_F(TrainerCheckpointTest, ARefusedBackgroundCommitFailsTheRunByTheNextSave) {
  // Attempt 2 raises the fence once attempt 1 has started: every commit of 1 is refused.
  fence_hook_ = [](const std::string& dir) {
    ASSERT_TRUE(CheckpointManager(dir, 0, nullptr, /*attempt=*/2).RaiseFence().ok());
  };
  for (const bool async : {true, false}) {
    SCOPED_TRACE(async ? "async" : "sync");
    const spec::JobSpec spec = Spec(async ? "async" : "sync", async);
    Outcome run = Train(spec, -1, /*attempt=*/1);
    ASSERT_FALSE(run.summary.ok());
    EXPECT_THAT(run.summary.status().message(),
                HasSubstr("checkpoint step-00000004 of attempt 1 refused: " + spec.checkpoint.dir +
                          " is fenced at attempt 2"));
    // Synchronous: at the save itself; asynchronous: after the step in which the write ended,
    // at the latest when the next save finds the error.
    if (async) {
      EXPECT_GT(run.losses.size(), 4u);
      EXPECT_LE(run.losses.size(), 8u);
    } else {
      EXPECT_EQ(run.losses.size(), 4u);
    }
    EXPECT_TRUE(run.reported.empty());
    EXPECT_TRUE(run.latest_at_return.empty());
  }
}

}  // namespace
}  // namespace trainyard::trainer
