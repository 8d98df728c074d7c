// Acceptance of failure handling with the real binaries on loopback: a worker killed with
// SIGKILL, a rank stopped with SIGSTOP, the coordinator killed and restarted.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>

#include "tests/testing/cluster.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::TempDir;
using testing::WaitUntil;

// Fashion-MNIST through a small MLP on two ranks, checkpointing every `every` steps.
std::string Spec(const std::string& name, int steps, int every, const std::string& extra = "") {
  return R"({"name":")" + name +
         R"(","model":{"mlp":{"sizes":[784,128,10]}},)"
         R"("data":{"fashion_mnist":{"limit":12800},"num_workers":0},"optimizer":{"sgd":{"lr":0.05}},)"
         R"("batch_size":32,"steps":)" +
         std::to_string(steps) + R"(,"checkpoint":{"every_steps":)" + std::to_string(every) +
         R"(},"parallelism":{"world_size":2,"collective_timeout_seconds":60})" + extra + "}";
}

int64_t LastCheckpointStep(const std::vector<v1::JobEvent>& events) {
  int64_t step = 0;
  for (const auto& e : events) {
    if (e.checkpoint().empty()) continue;
    step = std::stoll(e.checkpoint().substr(e.checkpoint().rfind("step-") + 5));
  }
  return step;
}

// The first step event after attempt `n` was scheduled.
int64_t FirstStepOfAttempt(const std::vector<v1::JobEvent>& events, int n) {
  bool in = false;
  for (const auto& e : events) {
    if (e.has_state() && e.state().to() == v1::SCHEDULED) in = e.state().attempt() == n;
    if (in && e.has_step()) return e.step().step();
  }
  return -1;
}

bool StepReached(JobWatch& w, int64_t step, std::chrono::milliseconds timeout) {
  return w.Wait([&](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= step; },
                timeout);
}

// Waits (up to 30 s) for a HANG diagnosis and returns the last one; nullopt when none came.
std::optional<v1::Diagnosis> WaitForHang(JobWatch& w) {
  const bool seen = w.Wait(
      [](const v1::JobEvent& e) {
        return e.has_diagnosis() && e.diagnosis().kind() == v1::Diagnosis::HANG;
      },
      30s);
  if (!seen) return std::nullopt;
  v1::Diagnosis hang;
  for (const auto& e : w.events()) {
    if (e.has_diagnosis()) hang = e.diagnosis();
  }
  return hang;
}

// Whether attempt 2 starts running within 60 s.
bool SecondAttemptRuns(JobWatch& w) {
  return w.Wait(
      [](const v1::JobEvent& e) {
        return e.has_state() && e.state().to() == v1::RUNNING && e.state().attempt() == 2;
      },
      60s);
}

TEST(FailureTest, KilledWorkerRestartsTheJobFromItsLatestCheckpoint) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(Spec("killed", 1500, 100));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(watch.Wait([](const v1::JobEvent& e) { return !e.checkpoint().empty(); }, 120s))
      << watch.Describe() << cluster.Logs();
  const int64_t checkpointed = LastCheckpointStep(watch.events());
  cluster.worker(1).Kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(watch.WaitForState(v1::RESTARTING, 15s)) << watch.Describe() << cluster.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 15s);
  auto described = cluster.client().GetJob(job->id());
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(described->restarts(), 1);
  // One worker is not enough for two ranks: it waits for the worker to come back.
  cluster.StartWorker(1);
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 240s)) << watch.Describe() << cluster.Logs();
  const std::vector<v1::JobEvent> events = watch.events();
  const int64_t resumed = FirstStepOfAttempt(events, 2);
  // Attempt 2 resumed from a checkpoint of attempt 1 (step numbers continue from it).
  EXPECT_GE(resumed, checkpointed + 1) << watch.Describe();
  EXPECT_EQ((resumed - 1) % 100, 0) << resumed;
  EXPECT_LT(resumed, 1500);
}

TEST(FailureTest, AWorkerStoppedWithSigtermTakesNoNewRanksAndTheJobWaitsForCapacity) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(Spec("drained", 100000, 100000));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 20, 120s)) << watch.Describe() << cluster.Logs();
  cluster.worker(1).Kill(SIGTERM);  // waits for the daemon to exit (at most 20 s)
  // The ranks agreed to stop and checkpointed; the coordinator heard it before the daemon left.
  ASSERT_TRUE(watch.WaitForState(v1::RESTARTING, 5s)) << watch.Describe() << cluster.Logs();
  std::string reason;
  for (const auto& e : watch.events()) {
    if (e.has_state() && e.state().to() == v1::RESTARTING) reason = e.state().reason();
  }
  EXPECT_NE(reason.find("stopped on SIGTERM"), std::string::npos) << reason;
  auto j = cluster.client().GetJob(job->id());
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE(j->checkpoint().empty());
  // The stopping worker took no new ranks: the job waits for capacity.
  EXPECT_EQ(j->attempts_size(), 1) << j->DebugString();
  EXPECT_EQ(j->state(), v1::RESTARTING);
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s)) << watch.Describe();
}

TEST(FailureTest, StoppedRankIsNamedHungAndTheAttemptRestarted) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(
      Spec("hung", 100000, 1000, R"(,"fault_tolerance":{"hang_timeout_seconds":5})"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 20, 120s)) << watch.Describe() << cluster.Logs();
  auto described = cluster.client().GetJob(job->id());
  ASSERT_TRUE(described.ok());
  int stopped_rank = -1;
  for (const auto& p : described->attempts(0).ranks()) {
    if (p.worker() == "w1") stopped_rank = p.rank();
  }
  std::vector<pid_t> ranks = cluster.RankPids(1);
  ASSERT_EQ(ranks.size(), 1u);
  ::kill(ranks[0], SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const std::optional<v1::Diagnosis> seen = WaitForHang(watch);
  ASSERT_TRUE(seen.has_value()) << watch.Describe() << cluster.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 30s);
  const v1::Diagnosis& hang = *seen;
  EXPECT_EQ(hang.rank(), stopped_rank);
  EXPECT_EQ(hang.worker(), "w1");
  EXPECT_EQ(hang.host(), "127.0.0.1");
  EXPECT_GT(hang.collective_seq(), 0);
  EXPECT_NE(hang.message().find("rank " + std::to_string(stopped_rank) + " on w1"),
            std::string::npos)
      << hang.message();
  // Restarted: a second attempt runs (the stopped process was killed).
  ASSERT_TRUE(SecondAttemptRuns(watch)) << watch.Describe() << cluster.Logs();
  EXPECT_EQ(::kill(ranks[0], 0), -1);  // gone
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s)) << watch.Describe();
}

// The only rank of a one-rank job stopped (SIGSTOP): no rank waits in a collective, yet the
// job is named hung within the timeout and restarted (Note [A job that makes no progress]).
TEST(FailureTest, TheStoppedOnlyRankOfAOneRankJobIsAHang) {
  TempDir dir;
  Cluster cluster(dir.path(), {1, 1, 10, {}, {}, {}});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(
      R"({"name":"alone","model":{"mlp":{"sizes":[784,128,10]}},)"
      R"("data":{"fashion_mnist":{"limit":12800},"num_workers":0},"optimizer":{"sgd":{"lr":0.05}},)"
      R"("batch_size":32,"steps":100000,"fault_tolerance":{"hang_timeout_seconds":3}})");
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 5, 120s)) << watch.Describe() << cluster.Logs();
  std::vector<pid_t> ranks = cluster.RankPids(0);
  ASSERT_EQ(ranks.size(), 1u);
  ::kill(ranks[0], SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const std::optional<v1::Diagnosis> seen = WaitForHang(watch);
  ASSERT_TRUE(seen.has_value()) << watch.Describe() << cluster.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 20s);
  const v1::Diagnosis& hang = *seen;
  EXPECT_EQ(hang.rank(), 0);
  EXPECT_NE(hang.message().find("no rank made progress"), std::string::npos) << hang.message();
  EXPECT_NE(hang.message().find("rank 0 on w0 (127.0.0.1) no report for"), std::string::npos)
      << hang.message();
  ASSERT_TRUE(SecondAttemptRuns(watch)) << watch.Describe() << cluster.Logs();
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s)) << watch.Describe();
}

// A rank throttled from outside (stopped 30 ms of every 40) computes about four times longer
// per step than its peer, which waits for it in the all-reduce instead: it is flagged, and
// cleared once it runs freely again.
TEST(FailureTest, AThrottledRankIsFlaggedAsAStragglerAndClearedAfterwards) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(
      R"({"name":"slow","model":{"mlp":{"sizes":[784,1024,1024,10]}},"data":{"fashion_mnist":{"limit":12800},"num_workers":0},)"
      R"("optimizer":{"sgd":{}},"batch_size":128,"steps":1000000,"parallelism":{"world_size":2},)"
      R"("fault_tolerance":{"straggler_factor":2,"straggler_window_steps":10}})");
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 5, 120s)) << watch.Describe() << cluster.Logs();
  std::vector<pid_t> ranks = cluster.RankPids(1);
  ASSERT_EQ(ranks.size(), 1u);
  auto diagnosed = [&](v1::Diagnosis::Kind kind) {
    return
        [kind](const v1::JobEvent& e) { return e.has_diagnosis() && e.diagnosis().kind() == kind; };
  };
  std::atomic<bool> throttle{true};
  std::thread throttler([&] {
    while (throttle) {
      ::kill(ranks[0], SIGSTOP);
      std::this_thread::sleep_for(30ms);
      ::kill(ranks[0], SIGCONT);
      std::this_thread::sleep_for(10ms);
    }
  });
  const bool flagged = watch.Wait(diagnosed(v1::Diagnosis::STRAGGLER), 60s);
  auto during = cluster.client().GetJob(job->id());
  throttle = false;
  throttler.join();
  ASSERT_TRUE(flagged) << watch.Describe() << cluster.Logs();
  ASSERT_TRUE(during.ok());
  v1::Diagnosis d;
  for (const auto& e : watch.events()) {
    if (e.has_diagnosis()) d = e.diagnosis();
  }
  EXPECT_EQ(d.worker(), "w1");
  EXPECT_NE(d.message().find("is a straggler"), std::string::npos) << d.message();
  EXPECT_EQ(during->stragglers_size(), 1);
  EXPECT_TRUE(watch.Wait(diagnosed(v1::Diagnosis::STRAGGLER_CLEARED), 60s)) << watch.Describe();
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s));
}

TEST(FailureTest, RestartedCoordinatorKeepsItsJobsAndTheRunningJobCompletes) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto first = cluster.client().Submit(Spec("first", 20, 0));
  ASSERT_TRUE(first.ok()) << first.status().message();
  {
    JobWatch w(cluster.client(), first->id());
    ASSERT_TRUE(w.WaitForState(v1::SUCCEEDED, 120s)) << w.Describe() << cluster.Logs();
  }
  auto second = cluster.client().Submit(Spec("second", 3000, 500));
  ASSERT_TRUE(second.ok());
  {
    JobWatch w(cluster.client(), second->id());
    ASSERT_TRUE(StepReached(w, 50, 120s)) << w.Describe() << cluster.Logs();
  }
  cluster.coordinator().Kill(SIGKILL);
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  // Everything is still there, in its state.
  auto listed = cluster.client().ListJobs({});
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->jobs_size(), 2);
  EXPECT_EQ(listed->jobs(0).id(), second->id());  // newest first
  EXPECT_EQ(listed->jobs(1).state(), v1::SUCCEEDED);
  EXPECT_EQ(listed->jobs(0).state(), v1::RUNNING);
  // The workers come back with the running ranks; the job finishes in the same attempt.
  JobWatch w(cluster.client(), second->id());
  ASSERT_TRUE(w.WaitForState(v1::SUCCEEDED, 240s)) << w.Describe() << cluster.Logs();
  auto done = cluster.client().GetJob(second->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->attempts_size(), 1) << done->DebugString();
  EXPECT_EQ(done->last_step().step(), 3000);
}

}  // namespace
}  // namespace trainyard
