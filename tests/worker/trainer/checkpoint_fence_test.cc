#include "worker/trainer/checkpoint_fence.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/nn/mlp.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using testing::Entries;
using ::testing::HasSubstr;
using testing::ParseSpec;
using testing::ReadRaw;
using testing::TempDir;
using namespace std::chrono_literals;

CheckpointState StateAt(int64_t step) {
  CheckpointState state;
  state.step = step;
  state.spec = Json::Object({{"model", "mlp"}});
  return state;
}

// A small MLP to save.
struct Model {
  Model() : gen(1), mlp(Config(), &gen) {}
  static nn::MlpConfig Config() {
    nn::MlpConfig c;
    c.sizes = {3, 4, 2};
    return c;
  }
  Generator gen;
  nn::Mlp mlp;
};

TEST(CheckpointFenceTest, RaiseWritesTheAttemptDurablyAndNeverLowersIt) {
  TempDir tmp;
  const std::string dir = tmp.File("job-1");  // created by Raise
  EXPECT_EQ(ReadFence(dir).value(), 0);
  ASSERT_TRUE(CheckpointFence(dir, 2).Raise().ok());
  EXPECT_EQ(ReadRaw(dir + "/" + kFenceFile), "2\n");
  EXPECT_EQ(ReadFence(dir).value(), 2);
  ASSERT_TRUE(CheckpointFence(dir, 2).Raise().ok()) << "raising to the same attempt again";

  const Status stale = CheckpointFence(dir, 1).Raise();
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.message()),
              HasSubstr("attempt 1 is stale: " + dir + " is fenced at attempt 2"));
  EXPECT_EQ(ReadFence(dir).value(), 2) << "a stale raise lowered the fence";

  ASSERT_TRUE(CheckpointFence(dir, 12).Raise().ok());
  EXPECT_EQ(ReadRaw(dir + "/" + kFenceFile), "12\n");  // written in place, longer
}

TEST(CheckpointFenceTest, AFenceFileHoldingGarbageIsDataLossNamingIt) {
  TempDir tmp;
  testing::WriteRaw(tmp.File(kFenceFile), "two\n");
  const Status s = CheckpointFence(tmp.path(), 3).Raise();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr(tmp.File(kFenceFile)));
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"two\""));
}

TEST(CheckpointFenceTest, CommitWaitsForTheRaisersLockAndGivesUpAfterItsTimeout) {
  TempDir tmp;
  ASSERT_TRUE(CheckpointFence(tmp.path(), 1).Raise().ok());
  const int fd = ::open(tmp.File(kFenceFile).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // as a raise in progress holds it
  bool ran = false;
  const Status s = CheckpointFence(tmp.path(), 1, 50ms).Commit("step-00000001", [&] {
    ran = true;
    return OkStatus();
  });
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(tmp.File(kFenceFile)));
  EXPECT_FALSE(ran) << "committed without the lock";
  ::close(fd);
  EXPECT_TRUE(CheckpointFence(tmp.path(), 1, 50ms)
                  .Commit("step-00000001",
                          [&] {
                            ran = true;
                            return OkStatus();
                          })
                  .ok());
  EXPECT_TRUE(ran);
}

TEST(CheckpointFenceTest, AStaleCommitIsRefusedAndTheNewestGoodCheckpointStaysIntact) {
  TempDir tmp;
  FakeClock clock;
  Model model;
  CheckpointManager stale(tmp.path(), /*keep_last=*/1, &clock, /*attempt=*/1);
  ASSERT_TRUE(stale.RaiseFence().ok());
  ASSERT_TRUE(stale.Save(model.mlp, nullptr, StateAt(110)).ok());
  const std::string good = ReadRaw(tmp.File("step-00000110/model.safetensors"));

  CheckpointManager current(tmp.path(), 1, &clock, /*attempt=*/2);
  ASSERT_TRUE(current.RaiseFence().ok());
  const Status refused = stale.Save(model.mlp, nullptr, StateAt(120));
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(), "checkpoint step-00000120 of attempt 1 refused: " + tmp.path() +
                                   " is fenced at attempt 2");
  // Neither the refused step nor its temporary directory; the older one was not pruned.
  EXPECT_THAT(Entries(tmp.path()), ElementsAre(kFenceFile, "step-00000110"));
  EXPECT_EQ(current.Latest().value(), tmp.File("step-00000110"));
  EXPECT_EQ(ReadRaw(tmp.File("step-00000110/model.safetensors")), good);

  // The current attempt commits, and its manifest names it.
  ASSERT_TRUE(current.Save(model.mlp, nullptr, StateAt(130)).ok());
  EXPECT_THAT(Entries(tmp.path()), ElementsAre(kFenceFile, "step-00000130"));
  EXPECT_EQ(ReadManifest(tmp.File("step-00000130/manifest.json"))->state.attempt, 2);
}

TEST(CheckpointFenceTest, ARunWithoutAnAttemptWritesNoFenceAndIgnoresOne) {
  TempDir tmp;
  Model model;
  CheckpointManager plain(tmp.File("plain"), 0);
  ASSERT_TRUE(plain.RaiseFence().ok());
  ASSERT_TRUE(plain.Save(model.mlp, nullptr, StateAt(5)).ok());
  EXPECT_THAT(Entries(tmp.File("plain")), ElementsAre("step-00000005"));
  EXPECT_EQ(ReadManifest(tmp.File("plain/step-00000005/manifest.json"))->state.attempt, 0);
  const std::string text = ReadRaw(tmp.File("plain/step-00000005/manifest.json"));
  EXPECT_EQ(text.find("\"attempt\""), std::string::npos) << text;

  // `trainyard train` on a directory an attempt fenced behaves as before: it commits.
  ASSERT_TRUE(CheckpointFence(tmp.File("plain"), 4).Raise().ok());
  EXPECT_TRUE(plain.Save(model.mlp, nullptr, StateAt(6)).ok());
  EXPECT_EQ(ReadFence(tmp.File("plain")).value(), 4);
}

// The trainer's side: rank 0 of an attempt raises the fence before resuming; a stale attempt
// does not start, and one fenced out while running fails at its next checkpoint.
class TrainerFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string rows;
    for (int i = 0; i < 64; ++i)
      rows += std::to_string(i % 4) + ",1," + std::to_string(i % 2) + "\n";
    testing::WriteRaw(dir_.File("data.csv"), rows);
  }
  spec::JobSpec Spec(int steps) {
    return ParseSpec(R"({"model": {"mlp": {"sizes": [2, 4, 2]}}, "data": {"csv": {"path": ")" +
                     dir_.File("data.csv") + R"("}, "num_workers": 0}, "optimizer": {"sgd": {}},)" +
                     R"( "batch_size": 8, "steps": )" + std::to_string(steps) +
                     R"(, "checkpoint": {"dir": ")" + dir_.File("ckpt") +
                     R"(", "every_steps": 2}})");
  }
  TempDir dir_;
};

TEST_F(TrainerFenceTest, AnAttemptRaisesTheFenceAndAStaleOneFailsAtOnceNamingBoth) {
  TrainerOptions options;
  options.attempt = 3;
  auto trainer = Trainer::Create(Spec(4), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ(ReadFence(dir_.File("ckpt")).value(), 3);
  ASSERT_TRUE((*trainer)->Run().ok());

  options.attempt = 2;
  auto stale = Trainer::Create(Spec(4), options);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.status().message()),
              HasSubstr("attempt 2 is stale: " + dir_.File("ckpt") + " is fenced at attempt 3"));
}

TEST_F(TrainerFenceTest, AnAttemptFencedOutWhileRunningFailsAtItsNextCheckpoint) {
  std::atomic<bool> fenced{false};
  TrainerOptions options;
  options.attempt = 1;
  options.on_checkpoint = [&](const std::string&, int64_t step) {
    // A newer attempt starts elsewhere after step 2's checkpoint.
    if (step == 2) fenced = CheckpointFence(dir_.File("ckpt"), 2).Raise().ok();
  };
  auto trainer = Trainer::Create(Spec(6), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  StatusOr<TrainSummary> run = (*trainer)->Run();
  ASSERT_TRUE(fenced);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(run.status().message()),
              HasSubstr("checkpoint step-00000004 of attempt 1 refused: " + dir_.File("ckpt") +
                        " is fenced at attempt 2"));
  EXPECT_EQ(CheckpointManager(dir_.File("ckpt"), 0).Latest().value(),
            dir_.File("ckpt/step-00000002"));
}

}  // namespace
}  // namespace trainyard::trainer
