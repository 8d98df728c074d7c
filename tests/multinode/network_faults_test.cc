// Network faults on nodes in network namespaces, each end to end with the real binaries: a
// worker cut off from the coordinator, a node cut off from its peers, the coordinator cut
// off from everyone, a flapping link, a link capped at 100 Mbit/s. Each test prints its
// figures ("FIGURE ...": how long the fault took to be detected and the job to recover).
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "tests/multinode/multinode.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::Net;
using testing::TempDir;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool StepReached(JobWatch& w, int64_t step, std::chrono::milliseconds timeout) {
  return w.Wait([&](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= step; },
                timeout);
}

// The index of the worker running `rank` in the job's latest attempt (-1: unknown).
int WorkerOfRank(Cluster& c, const std::string& job, int rank) {
  auto j = c.client().GetJob(job);
  if (!j.ok() || j->attempts_size() == 0) return -1;
  for (const auto& r : j->attempts(j->attempts_size() - 1).ranks()) {
    if (r.rank() == rank) return std::stoi(r.worker().substr(1));
  }
  return -1;
}

// The time of the first event at or after `since_ms` matching `match` (-1: none).
int64_t FirstEventTime(const std::vector<v1::JobEvent>& events, int64_t since_ms,
                       const std::function<bool(const v1::JobEvent&)>& match) {
  for (const auto& e : events) {
    if (e.time_ms() >= since_ms && match(e)) return e.time_ms();
  }
  return -1;
}

bool IsRestart(const v1::JobEvent& e) { return e.has_state() && e.state().to() == v1::RESTARTING; }

// The first step event of attempt `n` (its time; -1: none).
int64_t AttemptFirstStepTime(const std::vector<v1::JobEvent>& events, int n) {
  bool in = false;
  for (const auto& e : events) {
    if (e.has_state() && e.state().to() == v1::SCHEDULED) in = e.state().attempt() == n;
    if (in && e.has_step()) return e.time_ms();
  }
  return -1;
}

void Figure(const std::string& what, int64_t fault_ms, int64_t detected_ms, int64_t recovered_ms) {
  std::cout << "FIGURE " << what << ": detected after "
            << (detected_ms < 0 ? -1.0 : (detected_ms - fault_ms) / 1000.0)
            << " s, recovered after "
            << (recovered_ms < 0 ? -1.0 : (recovered_ms - fault_ms) / 1000.0) << " s\n";
}

// The job ended SUCCEEDED after `attempts` attempts, reached its last step, and is the only job.
// (attempts: how many it took, or with max_attempts > attempts, at least `attempts` and at
// most `max_attempts`.)
void ExpectOneJobSucceeded(Cluster& c, const std::string& id, int attempts, int64_t steps,
                           int max_attempts = 0) {
  auto listed = c.client().ListJobs({});
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_EQ(listed->jobs_size(), 1);
  auto j = c.client().GetJob(id);
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->state(), v1::SUCCEEDED) << j->DebugString();
  EXPECT_GE(j->attempts_size(), attempts) << j->DebugString();
  EXPECT_LE(j->attempts_size(), std::max(attempts, max_attempts)) << j->DebugString();
  EXPECT_EQ(j->last_step().step(), steps);
}

// The jobs are long enough that they cannot finish while a fault is being detected (a lease of
// 7.5 s at the 200 steps/s an idle 2-core machine reaches), else the next attempt would resume
// at the last step and report none.
class NetworkFaultTest : public ::testing::Test {
 protected:
  bool Cut(int node, Net net) { return SetLink(node, net, false); }
  bool Restore(int node, Net net) { return SetLink(node, net, true); }
  bool SetLink(int node, Net net, bool up) {
    std::string error;
    const bool ok = cluster_->lab()->SetLink(node, net, up, &error);
    EXPECT_TRUE(ok) << error;
    return ok;
  }

  TempDir dir_;
  std::unique_ptr<Cluster> cluster_;
};

// Worker node cut off from the coordinator (ctl0 down), still reaching its peers: it stops its
// ranks when its lease runs out, the coordinator declares it lost, and the job resumes on the
// spare worker from its latest checkpoint.
TEST_F(NetworkFaultTest, AWorkerCutOffFromTheCoordinatorIsReplacedByTheSpare) {
  cluster_ = testing::StartNamespaced(dir_.path(), 3);
  ASSERT_NE(cluster_, nullptr);
  auto job = cluster_->client().Submit(testing::MlpSpec("cut", 2, 3000, 100));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster_->client(), job->id());
  ASSERT_TRUE(StepReached(watch, 150, 120s)) << watch.Describe() << cluster_->Logs();
  const int victim = WorkerOfRank(*cluster_, job->id(), 1);
  ASSERT_GE(victim, 0);
  const int64_t fault = NowMs();
  ASSERT_TRUE(Cut(victim + 1, Net::kControl));
  ASSERT_TRUE(watch.Wait(IsRestart, 60s)) << watch.Describe() << cluster_->Logs();
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 240s)) << watch.Describe() << cluster_->Logs();
  const auto events = watch.events();
  Figure("worker cut off from the coordinator", fault, FirstEventTime(events, fault, IsRestart),
         AttemptFirstStepTime(events, 2));
  ExpectOneJobSucceeded(*cluster_, job->id(), 2, 3000);
  testing::ExpectContinuousLoss(events, 2);
  auto j = cluster_->client().GetJob(job->id());
  for (const auto& r : j->attempts(1).ranks()) EXPECT_NE(r.worker(), "w" + std::to_string(victim));
  // The cut worker's ranks are gone; once the link is back it registers again.
  EXPECT_TRUE(cluster_->RankPids(victim).empty());
  ASSERT_TRUE(Restore(victim + 1, Net::kControl));
  EXPECT_TRUE(testing::WaitUntil([&] { return cluster_->AliveWorkers() == 3; }, 60s))
      << cluster_->Logs();
}

// A rank's node cut off from its peers (data0 down), still reaching the coordinator: the
// collective times out naming the rank it waited for; the next attempt cannot connect Gloo's
// mesh and its error names both ends; once the link is back the job resumes from its latest
// checkpoint.
TEST_F(NetworkFaultTest, ANodeCutOffFromItsPeersFailsTheCollectiveAndTheJobResumes) {
  cluster_ = testing::StartNamespaced(dir_.path(), 2);
  ASSERT_NE(cluster_, nullptr);
  auto job = cluster_->client().Submit(testing::MlpSpec("split", 2, 1000, 100));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster_->client(), job->id());
  ASSERT_TRUE(StepReached(watch, 150, 120s)) << watch.Describe() << cluster_->Logs();
  const int victim = WorkerOfRank(*cluster_, job->id(), 1);
  const int64_t fault = NowMs();
  ASSERT_TRUE(Cut(victim + 1, Net::kData));
  auto restarts = [&] {
    int n = 0;
    for (const auto& e : watch.events()) n += IsRestart(e);
    return n;
  };
  ASSERT_TRUE(testing::WaitUntil([&] { return restarts() >= 2; }, 120s))
      << watch.Describe() << cluster_->Logs();
  const int64_t healed = NowMs();
  ASSERT_TRUE(Restore(victim + 1, Net::kData));
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 240s)) << watch.Describe() << cluster_->Logs();
  const auto events = watch.events();
  Figure("node cut off from its peers", fault, FirstEventTime(events, fault, IsRestart),
         AttemptFirstStepTime(events, 3));
  std::cout << "FIGURE node cut off from its peers: attempt 3 stepped "
            << (AttemptFirstStepTime(events, 3) - healed) / 1000.0
            << " s after the link returned\n";
  ExpectOneJobSucceeded(*cluster_, job->id(), 3, 1000);
  testing::ExpectContinuousLoss(events, 3);
  auto j = cluster_->client().GetJob(job->id());
  ASSERT_TRUE(j.ok());
  // Attempt 1's verdict names the collective and the rank it waited for; attempt 2's, both
  // ends of the connection that could not be made.
  const std::string first = j->attempts(0).end_reason();
  EXPECT_NE(first.find("timed out after 15s waiting for rank"), std::string::npos) << first;
  const std::string second = j->attempts(1).end_reason();
  for (int node : {1, 2}) {
    const std::string address = cluster_->lab()->Address(node, Net::kData);
    EXPECT_NE(second.find(address), std::string::npos) << address << " in " << second;
  }
}

// The coordinator's node cut off from everyone for about 10 s, longer than the workers' lease:
// the workers stop their ranks, and when the link is back they register again, report the
// exits, and the job resumes from its latest checkpoint.
TEST_F(NetworkFaultTest, TheCoordinatorCutOffFromEveryoneResumesTheJobWhenTheLinkReturns) {
  cluster_ = testing::StartNamespaced(dir_.path(), 2);
  ASSERT_NE(cluster_, nullptr);
  auto job = cluster_->client().Submit(testing::MlpSpec("island", 2, 3000, 100));
  ASSERT_TRUE(job.ok()) << job.status().message();
  // Step events are not stored: the steps before the cut come from this watch, which the cut
  // ends, and those after from one started once the link is back.
  JobWatch before(cluster_->client(), job->id());
  ASSERT_TRUE(StepReached(before, 150, 120s)) << before.Describe() << cluster_->Logs();
  const int64_t fault = NowMs();
  ASSERT_TRUE(Cut(0, Net::kControl));
  // Every worker's ranks stop once its lease runs out (bounded: the lease is under 10 s).
  const bool stopped = testing::WaitUntil(
      [&] { return cluster_->RankPids(0).empty() && cluster_->RankPids(1).empty(); }, 30s);
  const int64_t ranks_stopped = NowMs();
  EXPECT_TRUE(stopped) << cluster_->Logs();
  std::this_thread::sleep_for(3s);  // the outage's length: about 10 s in all, past the lease
  ASSERT_TRUE(Restore(0, Net::kControl));
  JobWatch watch(cluster_->client(), job->id());
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 240s)) << watch.Describe() << cluster_->Logs();
  std::vector<v1::JobEvent> events = before.events();
  for (const auto& e : watch.events()) events.push_back(e);
  Figure("coordinator cut off from everyone (ranks stopped by their lease)", fault, ranks_stopped,
         AttemptFirstStepTime(events, 2));
  ExpectOneJobSucceeded(*cluster_, job->id(), 2, 3000);
  testing::ExpectContinuousLoss(events, 2);
}

// A node whose links flap (down 2 s, up 2 s, five times): neither its lease nor the
// coordinator's timeout runs out, so the job rides it out in one attempt.
TEST_F(NetworkFaultTest, AFlappingLinkSlowsTheJobButDoesNotRestartIt) {
  cluster_ = testing::StartNamespaced(dir_.path(), 2);
  ASSERT_NE(cluster_, nullptr);
  auto job = cluster_->client().Submit(testing::MlpSpec("flap", 2, 2000, 500));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster_->client(), job->id());
  ASSERT_TRUE(StepReached(watch, 50, 120s)) << watch.Describe() << cluster_->Logs();
  auto step_now = [&] { return testing::LossByStep(watch.events()).rbegin()->first; };
  const int64_t before = step_now();
  for (int i = 0; i < 5; ++i) {
    for (Net net : {Net::kControl, Net::kData}) ASSERT_TRUE(Cut(2, net));
    std::this_thread::sleep_for(2s);  // the fault's duration, not a wait for a condition
    for (Net net : {Net::kControl, Net::kData}) ASSERT_TRUE(Restore(2, net));
    std::this_thread::sleep_for(2s);
  }
  EXPECT_GT(step_now(), before) << "no progress while the link flapped";
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 240s)) << watch.Describe() << cluster_->Logs();
  ExpectOneJobSucceeded(*cluster_, job->id(), 1, 2000);
  for (const auto& e : watch.events()) {
    EXPECT_FALSE(e.has_diagnosis() && e.diagnosis().kind() == v1::Diagnosis::HANG)
        << e.ShortDebugString();
  }
}

// A node whose data link is capped at 100 Mbit/s: every step waits for its all-reduce, so the
// job slows down, but it progresses: no hang is declared, and the straggler verdict names the
// slow node (by its links' round trips: Note [Slow links] in server/health.h).
TEST_F(NetworkFaultTest, ALinkCappedAt100MbitIsNamedAsAStragglerNotAHang) {
  cluster_ = testing::StartNamespaced(dir_.path(), 3);
  ASSERT_NE(cluster_, nullptr);
  auto job = cluster_->client().Submit(testing::MlpSpec("capped", 3, 100000, 0));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster_->client(), job->id());
  ASSERT_TRUE(StepReached(watch, 100, 120s)) << watch.Describe() << cluster_->Logs();
  auto rate = [&](int64_t from_ms, int64_t to_ms) {  // steps per second reported in the window
    int64_t first = -1, last = -1, first_ms = 0, last_ms = 0;
    for (const auto& e : watch.events()) {
      if (!e.has_step() || e.time_ms() < from_ms || e.time_ms() > to_ms) continue;
      if (first < 0) first = e.step().step(), first_ms = e.time_ms();
      last = e.step().step(), last_ms = e.time_ms();
    }
    return last_ms > first_ms ? 1000.0 * (last - first) / (last_ms - first_ms) : 0.0;
  };
  const int victim = WorkerOfRank(*cluster_, job->id(), 1);
  std::string error;
  const int64_t fault = NowMs();
  const double before = rate(fault - 5000, fault);
  ASSERT_TRUE(cluster_->lab()->Cap(victim + 1, Net::kData, "100mbit", &error)) << error;
  const std::string slow = cluster_->lab()->Address(victim + 1, Net::kData);
  auto named = [&](const v1::JobEvent& e) {
    return e.has_diagnosis() && e.diagnosis().kind() == v1::Diagnosis::STRAGGLER &&
           e.diagnosis().host() == slow;
  };
  ASSERT_TRUE(watch.Wait(named, 60s)) << watch.Describe() << cluster_->Logs();
  const int64_t detected = FirstEventTime(watch.events(), fault, named);
  // Progress goes on, slower: 30 more steps within the minute.
  const int64_t at = testing::LossByStep(watch.events()).rbegin()->first;
  ASSERT_TRUE(StepReached(watch, at + 30, 60s)) << watch.Describe() << cluster_->Logs();
  const double after = rate(detected, NowMs());
  std::cout << "FIGURE link capped at 100 Mbit/s: " << before << " steps/s before, " << after
            << " after; named a straggler after " << (detected - fault) / 1000.0 << " s\n";
  EXPECT_LT(after, before / 2);
  EXPECT_GT(after, 0);
  ASSERT_TRUE(cluster_->client().Cancel(job->id(), false).ok());
  ASSERT_TRUE(watch.WaitForState(v1::CANCELLED, 60s)) << watch.Describe();
  for (const auto& e : watch.events()) {
    EXPECT_FALSE(e.has_diagnosis() && e.diagnosis().kind() == v1::Diagnosis::HANG)
        << e.ShortDebugString();
    if (e.has_diagnosis() && e.diagnosis().kind() == v1::Diagnosis::STRAGGLER) {
      EXPECT_EQ(e.diagnosis().host(), slow) << e.ShortDebugString();
    }
  }
  auto j = cluster_->client().GetJob(job->id());
  EXPECT_EQ(j->attempts_size(), 1);
}

}  // namespace
}  // namespace trainyard
