// Acceptance of elastic jobs (docs/design/009-elastic.md) with the real binaries on loopback:
// a worker killed mid-run (the job shrinks without a restart and grows back when the worker
// returns), a rank stopped with SIGSTOP, and repeated kills and restarts during one run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "tests/testing/cluster.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::TempDir;
using testing::WaitUntil;

// A character-level GPT on the King James Bible (scripts/test.sh installs it), smaller than
// examples/kjv-gpt.yaml so that three ranks share CI's two cores: 3 ranks (at least 2), each
// step 3 micro-batches of 8 sequences.
std::string ElasticSpec(const std::string& name, int steps, const std::string& extra = "") {
  return R"({"name":")" + name +
         R"(","model":{"gpt":{"context":32,"n_layer":1,"n_head":2,"n_embd":32,"dropout":0.1}},)"
         R"("data":{"text":{"path":")" TY_SOURCE_DIR R"(/data/kjv.txt"},"num_workers":0},)"
         R"("optimizer":{"adamw":{"lr":0.001}},"batch_size":8,"num_threads":1,"steps":)" +
         std::to_string(steps) +
         R"(,"checkpoint":{"every_steps":0},"parallelism":{"world_size":3,"min_world_size":2,)"
         R"("collective_timeout_seconds":20})" +
         extra + "}";
}

StatusOr<v1::Job> Get(Cluster& c, const std::string& id) { return c.client().GetJob(id); }

int CurrentWorldSize(Cluster& c, const std::string& id) {
  auto job = Get(c, id);
  return job.ok() ? job->current_world_size() : -1;
}

bool IsRegroup(const v1::JobEvent& e) {
  return e.has_state() && e.state().reason().find("regroup") != std::string::npos;
}

// Around the n-th regroup event (1-based): the last step reported before it and the first
// after it, with that step's time (ms since the epoch); -1s when missing.
struct AroundRegroup {
  int64_t before = -1, after = -1, after_ms = -1;
};
AroundRegroup Around(const std::vector<v1::JobEvent>& events, int n) {
  AroundRegroup a;
  int seen = 0;
  for (const auto& e : events) {
    if (IsRegroup(e)) ++seen;
    if (!e.has_step()) continue;
    if (seen < n) a.before = e.step().step();
    if (seen == n && a.after < 0) {
      a.after = e.step().step();
      a.after_ms = e.step().time_ms();
    }
  }
  return a;
}

// Step events after the n-th regroup event.
int StepsAfterRegroup(const std::vector<v1::JobEvent>& events, int n) {
  int seen = 0, steps = 0;
  for (const auto& e : events) {
    if (IsRegroup(e)) ++seen;
    if (seen >= n && e.has_step()) ++steps;
  }
  return steps;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Three workers of one slot (a designated initializer trips -Wmissing-field-initializers).
testing::ClusterOptions ThreeWorkers() {
  testing::ClusterOptions o;
  o.workers = 3;
  return o;
}

bool StepReached(JobWatch& w, int64_t step, std::chrono::milliseconds timeout) {
  return w.Wait([&](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= step; },
                timeout);
}

TEST(ElasticTest, AKilledWorkerShrinksTheJobWithoutARestartAndItGrowsBackWhenTheWorkerReturns) {
  TempDir dir;
  Cluster cluster(dir.path(), ThreeWorkers());
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(ElasticSpec("shrink", 1200));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 30, 120s)) << watch.Describe() << cluster.Logs();
  EXPECT_EQ(CurrentWorldSize(cluster, job->id()), 3);

  cluster.worker(2).Kill(SIGKILL);
  const int64_t killed_ms = NowMs();
  ASSERT_TRUE(watch.Wait(IsRegroup, 30s)) << watch.Describe() << cluster.Logs();
  ASSERT_TRUE(WaitUntil([&] { return Around(watch.events(), 1).after > 0; }, 30s))
      << watch.Describe() << cluster.Logs();
  const AroundRegroup a = Around(watch.events(), 1);
  // The step in flight at the kill is done again, or it was applied by a survivor whose part of
  // the step's agreement completed before the peer died (an "ahead" member, whose state the group
  // then takes): that step is kept but has no report unless the ahead member was rank 0 (the
  // gap RepeatedKillsAndRestarts… also allows, one per regroup). No completed step is lost.
  EXPECT_LE(a.after, a.before + 2) << watch.Describe();
  EXPECT_GE(a.after, a.before) << watch.Describe();
  std::printf(
      "[ figures ] kill -9 of a worker to the next completed step: %.2f s (step %lld "
      "after %lld)\n",
      static_cast<double>(a.after_ms - killed_ms) / 1000.0, static_cast<long long>(a.after),
      static_cast<long long>(a.before));
  EXPECT_LT(a.after_ms - killed_ms, 10000) << "target: under 5 s";
  auto shrunk = Get(cluster, job->id());
  ASSERT_TRUE(shrunk.ok());
  EXPECT_EQ(shrunk->current_world_size(), 2);
  EXPECT_EQ(shrunk->restarts(), 0);
  EXPECT_GE(shrunk->regroups(), 1);
  EXPECT_TRUE(shrunk->attempts(shrunk->attempts_size() - 1).regrouped());

  cluster.StartWorker(2);
  ASSERT_TRUE(WaitUntil([&] { return CurrentWorldSize(cluster, job->id()) == 3; }, 60s))
      << watch.Describe() << cluster.Logs();
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 300s)) << watch.Describe() << cluster.Logs();
  auto done = Get(cluster, job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->restarts(), 0);
  EXPECT_EQ(done->last_step().step(), 1200);
  EXPECT_GE(done->regroups(), 2);
}

TEST(ElasticTest, AStoppedRankIsNamedAndTheGroupShrinksAndContinues) {
  TempDir dir;
  Cluster cluster(dir.path(), ThreeWorkers());
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(
      ElasticSpec("stopped", 100000, R"(,"fault_tolerance":{"hang_timeout_seconds":4})"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 20, 120s)) << watch.Describe() << cluster.Logs();
  std::vector<pid_t> ranks = cluster.RankPids(1);
  ASSERT_EQ(ranks.size(), 1u);
  ::kill(ranks[0], SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_TRUE(watch.Wait(
      [](const v1::JobEvent& e) {
        return e.has_diagnosis() && e.diagnosis().kind() == v1::Diagnosis::HANG;
      },
      30s))
      << watch.Describe() << cluster.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 15s);
  v1::Diagnosis hang;
  for (const auto& e : watch.events()) {
    if (e.has_diagnosis()) hang = e.diagnosis();
  }
  EXPECT_EQ(hang.worker(), "w1") << hang.message();
  ASSERT_TRUE(watch.Wait(IsRegroup, 30s)) << watch.Describe() << cluster.Logs();
  ASSERT_TRUE(WaitUntil([&] { return Around(watch.events(), 1).after > 0; }, 30s))
      << watch.Describe() << cluster.Logs();
  EXPECT_TRUE(WaitUntil([&] { return ::kill(ranks[0], 0) == -1; }, 20s)) << "not stopped";
  auto job_now = Get(cluster, job->id());
  ASSERT_TRUE(job_now.ok());
  EXPECT_EQ(job_now->restarts(), 0);
  EXPECT_EQ(job_now->current_world_size(), 2);
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s)) << watch.Describe();
}

// Repeated faults (TY_ELASTIC_KILLS, default 20): a random worker killed with SIGKILL, the
// group shrinks; the worker restarted, the group grows back; again. The run still ends with
// every one of its steps, each reported once and in order, without a restart.
TEST(ElasticTest, RepeatedKillsAndRestartsDuringOneRunLoseNoStep) {
  const char* env = std::getenv("TY_ELASTIC_KILLS");
  const int kills = env ? std::atoi(env) : 20;
  TempDir dir;
  Cluster cluster(dir.path(), ThreeWorkers());
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  const int steps = 100000;
  auto job = cluster.client().Submit(ElasticSpec("chaos", steps));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(StepReached(watch, 10, 120s)) << watch.Describe() << cluster.Logs();
  std::mt19937 random(20261206);  // the seed, printed below
  const auto start = std::chrono::steady_clock::now();
  const int64_t start_ms = NowMs();
  auto regroups = [&] {
    const auto events = watch.events();
    return static_cast<int>(std::count_if(events.begin(), events.end(), IsRegroup));
  };
  // Waits until the group has `size` ranks and has completed two steps since the last regroup
  // (the first may be one the old group finished before a grow); the first step after regroup
  // event n + 1 then comes back.
  auto settle = [&](int size, int n) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          return CurrentWorldSize(cluster, job->id()) == size &&
                 StepsAfterRegroup(watch.events(), regroups()) >= 2;
        },
        60s))
        << watch.Describe() << cluster.Logs();
    return Around(watch.events(), n + 1);
  };
  for (int k = 1; k <= kills && !HasFailure(); ++k) {
    const int victim = static_cast<int>(random() % 3);
    const int before = regroups();
    cluster.worker(victim).Kill(SIGKILL);
    const AroundRegroup a = settle(2, before);
    if (a.after > 0) {
      EXPECT_LE(a.after, a.before + 2) << "kill " << k;
    }
    cluster.StartWorker(victim);
    settle(3, regroups());
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto job_now = Get(cluster, job->id());
  ASSERT_TRUE(job_now.ok());
  EXPECT_EQ(job_now->restarts(), 0);
  EXPECT_GE(job_now->regroups(), 2 * kills);
  // Steps reported in order, each once. A report can be missing only where a member whose
  // update of the abandoned step went through became the state's source (Note [Elastic
  // training]): at most one per regroup.
  int64_t last = 0, unreported = 0;
  for (const auto& e : watch.events()) {
    if (!e.has_step()) continue;
    EXPECT_GT(e.step().step(), last) << "step " << e.step().step() << " reported again";
    EXPECT_LE(e.step().step(), last + 2) << "after step " << last;
    unreported += std::max<int64_t>(0, e.step().step() - last - 1);
    last = e.step().step();
  }
  EXPECT_LE(unreported, job_now->regroups());
  // Time recovering: the wall time less the steps taken in it at the median step time.
  std::vector<int64_t> times, gaps;
  for (const auto& e : watch.events()) {
    if (e.has_step() && e.step().time_ms() >= start_ms) times.push_back(e.step().time_ms());
  }
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  std::sort(gaps.begin(), gaps.end());
  const double step_s = gaps.empty() ? 0 : static_cast<double>(gaps[gaps.size() / 2]) / 1000.0;
  const double recovering = wall - static_cast<double>(times.size()) * step_s;
  std::printf(
      "[ figures ] %d kills and restarts (seed 20261206) in %.1f s: %.1f s recovering "
      "(%.1f%% of the time), %lld steps (%lld unreported)\n",
      kills, wall, recovering, 100 * recovering / wall, static_cast<long long>(last),
      static_cast<long long>(unreported));
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s)) << watch.Describe();
}

}  // namespace
}  // namespace trainyard
