// Coordinator's wakes for transports that cannot block (the callback streams of
// grpc_streams.cc): the commands wake with a TakeCommands that does not wait, and a Watcher's
// wake with a Next that does not wait.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/coordinator_testing.h"

namespace trainyard::server {
namespace {

using namespace std::chrono_literals;
using trainyard::v1::JobEvent;
using trainyard::v1::WorkerCommand;

// One rank of a small MLP: placed on the one worker there is.
constexpr char kSpec[] =
    R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
    R"("optimizer":{"sgd":{}},"steps":10})";

class CoordinatorWakeTest : public CoordinatorFixture {
 protected:
  // A job placed on the worker: its assignment is queued.
  std::string Place() {
    StatusOr<trainyard::v1::Job> job = c().Submit(kSpec);
    EXPECT_TRUE(job.ok()) << job.status();
    c().Tick();
    return job.ok() ? job->id() : "";
  }
};

TEST_F(CoordinatorWakeTest, AQueuedCommandWakesAndTheTakeReturnsItWithoutWaiting) {
  const int64_t incarnation = Register("a");
  int wakes = 0;
  ASSERT_TRUE(c().SetCommandsWake("a", incarnation, [&] { ++wakes; }).ok());
  EXPECT_EQ(wakes, 0);  // nothing waits yet
  Place();
  EXPECT_EQ(wakes, 1);
  StatusOr<std::vector<WorkerCommand>> taken = c().TakeCommands("a", incarnation);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_TRUE((*taken)[0].has_assign());
  EXPECT_TRUE(c().TakeCommands("a", incarnation)->empty());
}

TEST_F(CoordinatorWakeTest, CommandsWaitingAlreadyWakeAtOnce) {
  const int64_t incarnation = Register("a");
  Place();
  int wakes = 0;
  ASSERT_TRUE(c().SetCommandsWake("a", incarnation, [&] { ++wakes; }).ok());
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(c().TakeCommands("a", incarnation)->size(), 1u);
}

TEST_F(CoordinatorWakeTest, RegisteringAgainWakesTheOlderStreamWhoseTakeIsAborted) {
  const int64_t first = Register("a");
  int old_wakes = 0, new_wakes = 0;
  ASSERT_TRUE(c().SetCommandsWake("a", first, [&] { ++old_wakes; }).ok());
  const int64_t second = Register("a");
  EXPECT_EQ(old_wakes, 1);
  EXPECT_EQ(c().TakeCommands("a", first).status().code(), StatusCode::kAborted);
  EXPECT_EQ(c().SetCommandsWake("a", first, [] {}).code(), StatusCode::kAborted);
  ASSERT_TRUE(c().SetCommandsWake("a", second, [&] { ++new_wakes; }).ok());
  c().ClearCommandsWake("a", first);  // the older stream ends late: the newer wake stays
  Place();
  EXPECT_EQ(old_wakes, 1);
  EXPECT_EQ(new_wakes, 1);
  c().ClearCommandsWake("a", second);
  Register("a");
  EXPECT_EQ(new_wakes, 1);  // cleared: never again
}

TEST_F(CoordinatorWakeTest, ALostWorkerWakesAndItsTakeIsAborted) {
  const int64_t incarnation = Register("a");
  int wakes = 0;
  ASSERT_TRUE(c().SetCommandsWake("a", incarnation, [&] { ++wakes; }).ok());
  clock_.Advance(c().options().heartbeat_timeout + 1s);
  c().Tick();
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(c().TakeCommands("a", incarnation).status().code(), StatusCode::kAborted);
}

TEST_F(CoordinatorWakeTest, AWatchersWakeMayTakeEventsAndRunsNoMoreOnceCleared) {
  Register("a");
  StatusOr<trainyard::v1::Job> job = c().Submit(kSpec);  // PENDING: a cancel ends it at once
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  StatusOr<std::shared_ptr<Watcher>> watcher = c().Watch(id);
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  std::vector<trainyard::v1::JobState> seen;
  auto take = [&] {
    JobEvent e;
    while ((*watcher)->Next(&e, 0ms)) seen.push_back(e.state().to());
  };
  (*watcher)->SetWake(take);  // takes the current state at once
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], trainyard::v1::PENDING);
  ASSERT_TRUE(c().Cancel(id, false).ok());
  EXPECT_EQ(seen.back(), trainyard::v1::CANCELLED);
  EXPECT_TRUE((*watcher)->ended());
  const size_t before = seen.size();
  (*watcher)->ClearWake();
  JobEvent late;
  (*watcher)->Push(late);
  EXPECT_EQ(seen.size(), before);
}

}  // namespace
}  // namespace trainyard::server
