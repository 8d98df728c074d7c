#include "worker/trainer/async_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/autograd/engine.h"
#include "worker/nn/mlp.h"
#include "worker/ops/loss.h"
#include "worker/optim/adam.h"
#include "worker/tensor/factories.h"

namespace trainyard::trainer {
namespace {

namespace fs = std::filesystem;
using testing::BitwiseEqual;
using testing::Entries;
using ::testing::HasSubstr;
using testing::ReadRaw;
using testing::TempDir;

constexpr auto kTimeout = std::chrono::seconds(30);  // every wait's bound

// An MLP with AdamW, trained a step at a time on batches drawn from the step's number.
struct MlpRun {
  explicit MlpRun(uint64_t seed) : gen(seed), model(Config(), &gen) {
    optim::AdamWOptions options;
    options.lr = 0.01;
    optimizer = std::move(optim::AdamW::Create(model.NamedParameters(), options)).value();
  }
  static nn::MlpConfig Config() {
    nn::MlpConfig config;
    config.sizes = {6, 16, 3};
    return config;
  }
  void Step(int t) {
    Generator data(1000 + t);
    Tensor x = Randn({8, 6}, {}, &data);
    Tensor y = RandInt({8}, 0, 3, Options(DType::kInt64), &data);
    optimizer->ZeroGrad();
    ASSERT_TRUE(autograd::Backward(ops::CrossEntropy(model.Forward(x), y)).ok());
    optimizer->Step();
  }

  Generator gen;
  nn::Mlp model;
  std::unique_ptr<optim::AdamW> optimizer;
};

CheckpointState StateAt(int64_t step) {
  CheckpointState state;
  state.step = step;
  state.position = 8 * step;
  state.default_generator = {7, static_cast<uint64_t>(step)};
  state.spec = Json::Object({{"model", "mlp"}});
  return state;
}

// Saves run's current state asynchronously through `writer` (over `manager`).
StatusOr<std::optional<CommittedCheckpoint>> SaveAsync(AsyncCheckpointWriter& writer,
                                                       const CheckpointManager& manager,
                                                       MlpRun& run, int64_t step) {
  const std::vector<optim::NamedTensor> optimizer_state = run.optimizer->StateDict();
  return writer.Save(UniqueStateDict(run.model), &optimizer_state, manager.Stamped(StateAt(step)));
}

void ExpectSameFiles(const std::string& a, const std::string& b) {
  ASSERT_EQ(Entries(a), Entries(b));
  for (const std::string& name : Entries(a)) {
    EXPECT_EQ(ReadRaw(a + "/" + name), ReadRaw(b + "/" + name)) << name << " differs";
  }
}

// A latch that the writer thread waits on (bounded) until the test opens it.
struct Gate {
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kTimeout, [&] { return open; });
  }
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
};

TEST(HostSnapshotTest, ReusesItsBuffersWhileNamesShapesAndDtypesStayTheSame) {
  HostSnapshot snapshot;
  Tensor a = Full({2, 3}, 1.5), b = Full({4}, 2, Options(DType::kInt64));
  snapshot.Take({{"a", a}, {"b", b}});
  EXPECT_EQ(snapshot.allocations(), 2);
  EXPECT_EQ(snapshot.bytes(), 6 * 4 + 4 * 8);
  const void* a_buffer = snapshot.tensors()[0].second.raw_data();
  FillInPlace(a, 3);
  snapshot.Take({{"a", a}, {"b", b}});
  EXPECT_EQ(snapshot.allocations(), 2);  // reused
  EXPECT_EQ(snapshot.tensors()[0].second.raw_data(), a_buffer);
  EXPECT_TRUE(BitwiseEqual(snapshot.tensors()[0].second, a));
  EXPECT_NE(snapshot.tensors()[0].second.raw_data(), a.raw_data());  // a copy, not a
  snapshot.Take({{"a", Full({3, 2}, 1)}, {"b", b}});
  EXPECT_EQ(snapshot.allocations(), 3);  // a's shape changed
}

TEST(AsyncCheckpointTest, WritesTheSameBytesAsASynchronousSave) {
  TempDir tmp;
  FakeClock clock(1.7e9 + 0.5);
  CheckpointManager sync(tmp.File("sync"), 0, &clock), async(tmp.File("async"), 0, &clock);
  AsyncCheckpointWriter writer(&async);
  MlpRun run(1);
  for (int step = 1; step <= 2; ++step) {  // the second save reuses the snapshot's buffers
    run.Step(step);
    ASSERT_TRUE(sync.Save(run.model, run.optimizer.get(), StateAt(step)).ok());
    ASSERT_TRUE(SaveAsync(writer, async, run, step).ok());
  }
  StatusOr<std::optional<CommittedCheckpoint>> done = writer.Wait();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->has_value());
  EXPECT_EQ((*done)->path, tmp.File("async/step-00000002"));
  EXPECT_EQ((*done)->step, 2);
  for (const char* step : {"step-00000001", "step-00000002"}) {
    ExpectSameFiles(tmp.File(std::string("sync/") + step), tmp.File(std::string("async/") + step));
  }
  EXPECT_GT(writer.snapshot_bytes(), 0);
}

TEST(AsyncCheckpointTest, TheCheckpointHoldsTheStateOfItsStepWhileTrainingGoesOn) {
  TempDir tmp;
  CheckpointManager manager(tmp.path(), 0);
  Gate gate;
  AsyncCheckpointWriter::Hooks hooks;
  hooks.before_write = [&](int64_t) { EXPECT_TRUE(gate.Wait()); };
  AsyncCheckpointWriter writer(&manager, hooks);
  MlpRun run(1), saved(2);
  run.Step(1);
  ASSERT_TRUE(SaveAsync(writer, manager, run, 1).ok());
  std::vector<Tensor> expected;
  for (const auto& [name, t] : run.model.StateDict()) {
    expected.push_back(CopyToDevice(t, Device::Cpu()));
  }
  run.Step(2);  // training goes on while the write waits at the gate
  run.Step(3);
  gate.Open();
  ASSERT_TRUE(writer.Wait().ok());
  ASSERT_TRUE(LoadCheckpoint(tmp.File("step-00000001"), &saved.model, nullptr).ok());
  const nn::NamedTensors loaded = saved.model.StateDict();
  ASSERT_EQ(loaded.size(), expected.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_TRUE(BitwiseEqual(loaded[i].second, expected[i])) << loaded[i].first;
  }
}

TEST(AsyncCheckpointTest, ASaveWaitsForTheWriteInFlightAndBothCommit) {
  TempDir tmp;
  CheckpointManager manager(tmp.path(), 0);
  Gate slow_disk, waiting;
  AsyncCheckpointWriter::Hooks hooks;
  hooks.before_commit = [&](int64_t step) {
    if (step == 1) {
      EXPECT_TRUE(slow_disk.Wait());
    }
  };
  hooks.waiting = [&] { waiting.Open(); };
  AsyncCheckpointWriter writer(&manager, hooks);
  MlpRun run(1);
  run.Step(1);
  ASSERT_TRUE(SaveAsync(writer, manager, run, 1).ok());
  run.Step(2);
  std::atomic<bool> second_returned{false};
  StatusOr<std::optional<CommittedCheckpoint>> second = InternalError("not run");
  std::thread trainer([&] {
    second = SaveAsync(writer, manager, run, 2);
    second_returned = true;
  });
  ASSERT_TRUE(waiting.Wait()) << "the second save never waited";
  EXPECT_FALSE(second_returned.load());  // the first is still being written
  EXPECT_FALSE(fs::exists(tmp.File("step-00000001")));
  slow_disk.Open();
  trainer.join();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->has_value());
  EXPECT_EQ((*second)->step, 1);  // the first write's result, taken by the second save
  StatusOr<std::optional<CommittedCheckpoint>> last = writer.Wait();
  ASSERT_TRUE(last.ok() && last->has_value()) << last.status();
  EXPECT_EQ((*last)->step, 2);
  MlpRun loaded(3);
  for (const char* step : {"step-00000001", "step-00000002"}) {
    EXPECT_TRUE(LoadCheckpoint(tmp.File(step), &loaded.model, loaded.optimizer.get()).ok());
  }
}

TEST(AsyncCheckpointTest, AFailedWriteIsReturnedByTheNextSaveOrWaitNamingTheDirectory) {
  TempDir tmp;
  testing::WriteRaw(tmp.File("file"), "not a directory");
  CheckpointManager manager(tmp.File("file/ckpt"), 0);
  MlpRun run(1);
  {
    AsyncCheckpointWriter writer(&manager);
    ASSERT_TRUE(SaveAsync(writer, manager, run, 1).ok());  // the snapshot; the write fails
    StatusOr<std::optional<CommittedCheckpoint>> next = SaveAsync(writer, manager, run, 2);
    ASSERT_FALSE(next.ok());
    EXPECT_THAT(next.status().message(), HasSubstr(tmp.File("file/ckpt")));
    EXPECT_TRUE(writer.Wait().ok());  // the error was taken; the second save started nothing
  }
  AsyncCheckpointWriter writer(&manager);
  ASSERT_TRUE(SaveAsync(writer, manager, run, 3).ok());
  StatusOr<std::optional<CommittedCheckpoint>> done = writer.Wait();
  ASSERT_FALSE(done.ok());
  EXPECT_THAT(done.status().message(), HasSubstr(tmp.File("file/ckpt")));
}

// The child: commits step 1, then saves step 2 and, with its files written but not committed,
// tells the parent (a byte on `ready`) and waits to be killed. It computes nothing but small
// copies (below any thread pool's grain): a forked child has no pool threads.
[[noreturn]] void SaveAndHang(const std::string& dir, MlpRun& run, int ready) {
  CheckpointManager manager(dir, 0);
  AsyncCheckpointWriter::Hooks hooks;
  hooks.before_commit = [&](int64_t step) {
    if (step != 2) return;
    const char byte = 'x';
    if (::write(ready, &byte, 1) != 1) ::_exit(3);
    ::pause();  // SIGKILL ends it here; the bound is the parent's
  };
  AsyncCheckpointWriter writer(&manager, hooks);
  if (!SaveAsync(writer, manager, run, 1).ok() || !writer.Wait().ok()) ::_exit(2);
  if (!SaveAsync(writer, manager, run, 2).ok()) ::_exit(2);
  (void)writer.Wait();
  ::_exit(4);  // not reached: the parent kills the process first
}

TEST(AsyncCheckpointTest, AProcessKilledMidWriteLeavesThePreviousCheckpointNewest) {
  TempDir tmp;
  MlpRun run(1);
  run.Step(1);
  const nn::NamedTensors at_step_1 = UniqueStateDict(run.model);
  std::vector<Tensor> expected;
  for (const auto& [name, t] : at_step_1) expected.push_back(CopyToDevice(t, Device::Cpu()));
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    SaveAndHang(tmp.path(), run, pipe_fds[1]);
  }
  ::close(pipe_fds[1]);
  pollfd ready{pipe_fds[0], POLLIN, 0};
  const int polled = ::poll(&ready, 1, static_cast<int>(kTimeout.count() * 1000));
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(pipe_fds[0]);
  ASSERT_EQ(polled, 1) << "the child never reached step 2's commit";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << WEXITSTATUS(status);

  // Step 2's files are complete in the hidden directory, but only step 1 was committed.
  const std::string hidden = tmp.File(".tmp-step-00000002-" + std::to_string(child));
  EXPECT_TRUE(fs::exists(hidden + "/" + kManifestFile));
  CheckpointManager manager(tmp.path(), 0);
  StatusOr<std::optional<std::string>> latest = manager.Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, tmp.File("step-00000001"));
  MlpRun loaded(2);
  StatusOr<CheckpointState> state = LoadCheckpoint(**latest, &loaded.model, nullptr);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->step, 1);
  const nn::NamedTensors weights = UniqueStateDict(loaded.model);
  ASSERT_EQ(weights.size(), expected.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(BitwiseEqual(weights[i].second, expected[i])) << weights[i].first;
  }
  // The next save clears what the killed one left.
  ASSERT_TRUE(manager.Save(loaded.model, nullptr, StateAt(2)).ok());
  EXPECT_EQ(Entries(tmp.path()), (std::vector<std::string>{"step-00000001", "step-00000002"}));
}

}  // namespace
}  // namespace trainyard::trainer
