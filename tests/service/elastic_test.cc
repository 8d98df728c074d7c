// Acceptance of elastic jobs (issue 24 section 1; Note [Regroups] in
// server/coordinator_elastic.cc) with the real binaries on loopback: a worker killed with
// SIGKILL and a rank stopped with SIGSTOP shrink the group without a restart; a worker that
// comes back grows it again.
//
// DISABLED_ until the Trainer calls TrainerOptions::regroup (the Trainer side of elastic
// training, worker/trainer): without it a rank whose group breaks fails its run. Enable both
// once it has landed.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "tests/testing/cluster.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::TempDir;

// Fashion-MNIST through a small MLP, world_size 3 (the global batch), elastic between 2 and 3.
std::string Spec(const std::string& name, int steps) {
  return R"({"name":")" + name +
         R"(","model":{"mlp":{"sizes":[784,128,10]}},)"
         R"("data":{"fashion_mnist":{"limit":12800},"num_workers":0},"optimizer":{"sgd":{"lr":0.05}},)"
         R"("batch_size":32,"steps":)" +
         std::to_string(steps) +
         R"(,"checkpoint":{"every_steps":1000},"parallelism":{"world_size":3,"min_world_size":2,)"
         R"("max_world_size":3,"collective_timeout_seconds":60},)"
         R"("fault_tolerance":{"hang_timeout_seconds":10}})";
}

testing::ClusterOptions ThreeWorkers() {
  testing::ClusterOptions o;
  o.workers = 3;
  return o;
}

bool StepReached(JobWatch& w, int64_t step, std::chrono::milliseconds timeout) {
  return w.Wait([&](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= step; },
                timeout);
}

// The last step reported so far.
int64_t LastStep(JobWatch& w) {
  int64_t step = 0;
  for (const auto& e : w.events()) {
    if (e.has_step()) step = std::max(step, e.step().step());
  }
  return step;
}

bool Regrouped(const v1::JobEvent& e, int ranks) {
  return e.has_state() && e.state().from() == v1::RUNNING && e.state().to() == v1::RUNNING &&
         e.state().reason().find("with " + std::to_string(ranks) + " ranks") != std::string::npos;
}

// The first step reported after the regroup into `ranks` ranks; -1: none yet.
int64_t FirstStepAfter(const std::vector<v1::JobEvent>& events, int ranks) {
  bool regrouped = false;
  for (const auto& e : events) {
    regrouped = regrouped || Regrouped(e, ranks);
    if (regrouped && e.has_step()) return e.step().step();
  }
  return -1;
}

TEST(ElasticTest, DISABLED_AKilledWorkerShrinksTheJobWhichGrowsBackWhenItReturns) {
  TempDir dir;
  Cluster cluster(dir.path(), ThreeWorkers());
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(Spec("elastic", 3000));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 50, 120s)) << watch.Describe() << cluster.Logs();

  cluster.worker(1).Kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const int64_t at_kill = LastStep(watch);
  // The next step completes within 5 s, from memory: no restart, at most one step lost.
  ASSERT_TRUE(watch.Wait([](const v1::JobEvent& e) { return Regrouped(e, 2); }, 15s))
      << watch.Describe() << cluster.Logs();
  int64_t first_after = -1;
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return (first_after = FirstStepAfter(watch.events(), 2)) > 0; }, 15s))
      << watch.Describe();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s);
  EXPECT_GE(first_after, at_kill) << "at most one step lost";
  auto shrunk = cluster.client().GetJob(job->id());
  ASSERT_TRUE(shrunk.ok());
  EXPECT_EQ(shrunk->restarts(), 0);
  EXPECT_GE(shrunk->regroups(), 1);
  EXPECT_EQ(shrunk->current_world_size(), 2);

  cluster.StartWorker(1);
  ASSERT_TRUE(watch.Wait([](const v1::JobEvent& e) { return Regrouped(e, 3); }, 60s))
      << watch.Describe() << cluster.Logs();
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 300s)) << watch.Describe() << cluster.Logs();
  auto done = cluster.client().GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->restarts(), 0);
  EXPECT_GE(done->regroups(), 2);
  EXPECT_EQ(done->current_world_size(), 3);
}

TEST(ElasticTest, DISABLED_AStoppedRankIsLeftOutAndTheOthersContinue) {
  TempDir dir;
  Cluster cluster(dir.path(), ThreeWorkers());
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(Spec("stopped", 100000));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 20, 120s)) << watch.Describe() << cluster.Logs();
  std::vector<pid_t> ranks = cluster.RankPids(2);
  ASSERT_EQ(ranks.size(), 1u);
  ::kill(ranks[0], SIGSTOP);
  ASSERT_TRUE(watch.Wait([](const v1::JobEvent& e) { return Regrouped(e, 2); }, 60s))
      << watch.Describe() << cluster.Logs();
  const int64_t regrouped_at = LastStep(watch);
  ASSERT_TRUE(StepReached(watch, regrouped_at + 5, 30s)) << watch.Describe() << cluster.Logs();
  auto job_now = cluster.client().GetJob(job->id());
  ASSERT_TRUE(job_now.ok());
  EXPECT_EQ(job_now->restarts(), 0);
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s)) << watch.Describe();
}

}  // namespace
}  // namespace trainyard
