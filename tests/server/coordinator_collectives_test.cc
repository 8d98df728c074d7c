// When the coordinator makes a collective report and where it goes (server/
// coordinator_collectives.cc, Note [Collective flight recorder]): early, once a rank has waited
// half the hang timeout for a rank that is missing; again at the HANG verdict; the latest per
// attempt in Job.collectives, each as a JobEvent. A fake clock and fake workers.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/coordinator_testing.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using trainyard::v1::Job;
using trainyard::v1::RankStatus;

// Three ranks, a hang timeout of 5 s (under the 10 s heartbeat timeout).
constexpr const char* kSpec =
    R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
    R"("optimizer":{"sgd":{}},"steps":100,"parallelism":{"world_size":3},)"
    R"("fault_tolerance":{"hang_timeout_seconds":5,"max_restarts":5}})";

class CoordinatorCollectivesTest : public CoordinatorFixture {
 protected:
  // Runs attempt 1 of a three-rank job on workers a, b, c and watches it.
  void SetUp() override {
    CoordinatorFixture::SetUp();
    for (const char* w : {"a", "b", "c"}) Register(w);
    StatusOr<Job> job = c().Submit(kSpec);
    ASSERT_TRUE(job.ok()) << job.status();
    id_ = job->id();
    c().Tick();
    const Job placed = Get();
    for (const auto& p : placed.attempts(0).ranks()) worker_[p.rank()] = p.worker();
    ASSERT_EQ(worker_.size(), 3u);
    for (int rank = 0; rank < 3; ++rank) Heartbeat(Progress(rank, 56, 56, "forward"));
    ASSERT_EQ(Get().state(), trainyard::v1::RUNNING);
    StatusOr<std::shared_ptr<Watcher>> w = c().Watch(id_);
    ASSERT_TRUE(w.ok()) << w.status();
    watcher_ = *w;
  }

  RankStatus Progress(int rank, int64_t issued, int64_t done, const std::string& phase) {
    RankStatus s;
    s.set_job_id(id_);
    s.set_attempt(1);
    s.set_rank(rank);
    s.set_step(12);
    s.set_phase(phase);
    s.set_collectives_issued(issued);
    s.set_collectives_done(done);
    return s;
  }

  // Rank `rank` waits in all_reduce #57, issued `waited_ms` ago, and sends its flight records.
  RankStatus Waiting(int rank, int64_t waited_ms) {
    RankStatus s = Progress(rank, 57, 56, "allreduce_wait");
    s.set_phase_age_ms(waited_ms);
    s.set_collective_age_ms(waited_ms);
    trainyard::v1::CollectiveRecord* r = s.add_collectives();
    r->set_seq(57);
    r->set_op("all_reduce");
    r->set_numel(262144);
    r->set_dtype("float32");
    r->set_state("running");
    r->set_phase("backward");
    r->set_issued_age_ms(waited_ms);
    return s;
  }

  void Heartbeat(const RankStatus& s) {
    trainyard::v1::WorkerHeartbeat hb;
    hb.set_name(worker_[s.rank()]);
    *hb.add_ranks() = s;
    const Status st = c().Heartbeat(hb);
    EXPECT_TRUE(st.ok()) << st;
  }

  Job Get() {
    StatusOr<Job> job = c().GetJob(id_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : Job();
  }

  // The collective reports among the events published since the last call.
  std::vector<trainyard::v1::CollectiveReport> Reports() {
    std::vector<trainyard::v1::CollectiveReport> out;
    trainyard::v1::JobEvent e;
    while (watcher_->Next(&e, 0ms)) {
      if (e.has_collectives()) out.push_back(e.collectives());
    }
    return out;
  }

  std::string id_;
  std::map<int, std::string> worker_;
  std::shared_ptr<Watcher> watcher_;
};

TEST_F(CoordinatorCollectivesTest, AStoppedRankIsNamedWithinTheHangTimeoutThenAtTheHang) {
  Reports();
  // Rank 1 stops (SIGSTOP) after collective #56; ranks 0 and 2 go on into #57 and wait there.
  clock_.Advance(2s);
  Heartbeat(Waiting(0, 2000));
  Heartbeat(Waiting(2, 2000));
  c().Tick();
  EXPECT_TRUE(Reports().empty()) << "reported before half the hang timeout";

  clock_.Advance(1s);
  Heartbeat(Waiting(0, 3000));
  Heartbeat(Waiting(2, 3000));
  c().Tick();
  std::vector<trainyard::v1::CollectiveReport> reports = Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FALSE(reports[0].hang());
  EXPECT_EQ(reports[0].attempt(), 1);
  EXPECT_EQ(reports[0].seq(), 57);
  EXPECT_THAT(reports[0].missing(), ElementsAre(1));
  EXPECT_THAT(reports[0].waiting(), ElementsAre(0, 2));
  EXPECT_THAT(reports[0].verdict(),
              HasSubstr("rank 1 on " + worker_[1] + " (" + worker_[1] +
                        ".host) is missing from all_reduce #57 (262144 float32): no report for "
                        "3.0 s (stopped or dead?), last in phase forward at step 12"));
  EXPECT_EQ(Get().state(), trainyard::v1::RUNNING);
  ASSERT_EQ(Get().collectives_size(), 1);

  // The same finding again says nothing new.
  clock_.Advance(500ms);
  c().Tick();
  EXPECT_TRUE(Reports().empty());

  // The hang: the report again, marked so, in place of the early one.
  clock_.Advance(2500ms);
  Heartbeat(Waiting(0, 6000));
  Heartbeat(Waiting(2, 6000));
  c().Tick();
  reports = Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].hang());
  EXPECT_THAT(reports[0].missing(), ElementsAre(1));
  const Job job = Get();
  ASSERT_EQ(job.collectives_size(), 1);
  EXPECT_TRUE(job.collectives(0).hang());
  ASSERT_EQ(job.diagnoses_size(), 1);
  EXPECT_EQ(job.diagnoses(0).rank(), 1);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
}

TEST_F(CoordinatorCollectivesTest, AMissingRankThatFallsSilentIsReportedAgain) {
  Reports();
  // Rank 1's last report, just before it stopped, is still fresh when the others have waited
  // half the hang timeout: it is missing, in its last phase.
  clock_.Advance(1s);
  Heartbeat(Progress(1, 56, 56, "data"));
  clock_.Advance(2s);
  Heartbeat(Waiting(0, 3000));
  Heartbeat(Waiting(2, 3000));
  c().Tick();
  std::vector<trainyard::v1::CollectiveReport> reports = Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rows(1).state(), "missing");
  EXPECT_THAT(reports[0].verdict(), HasSubstr("it is in phase data at step 12"));
  // A second later its report is too old: silent, and reported again.
  clock_.Advance(1s);
  c().Tick();
  reports = Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rows(1).state(), "silent");
  EXPECT_THAT(reports[0].missing(), ElementsAre(1));
  ASSERT_EQ(Get().collectives_size(), 1);
  EXPECT_EQ(Get().collectives(0).rows(1).state(), "silent");
}

TEST_F(CoordinatorCollectivesTest, WaitingForAnEvaluationIsNotReportedEarly) {
  Reports();
  clock_.Advance(3s);
  RankStatus evaluating = Progress(1, 56, 56, "evaluate");
  evaluating.set_phase_age_ms(3000);
  Heartbeat(evaluating);
  Heartbeat(Waiting(0, 3000));
  Heartbeat(Waiting(2, 3000));
  c().Tick();
  EXPECT_TRUE(Reports().empty());
  EXPECT_EQ(Get().collectives_size(), 0);
}

TEST_F(CoordinatorCollectivesTest, RanksWaitingWithNobodyMissingAreReportedOnlyAtTheHang) {
  Reports();
  clock_.Advance(3s);
  for (int rank = 0; rank < 3; ++rank) Heartbeat(Waiting(rank, 3000));
  c().Tick();
  EXPECT_TRUE(Reports().empty());
  EXPECT_EQ(Get().collectives_size(), 0);
}

TEST_F(CoordinatorCollectivesTest, AFailedCollectiveIsReportedAtOnce) {
  Reports();
  clock_.Advance(200ms);
  RankStatus failed = Waiting(0, 200);
  failed.mutable_collectives(0)->set_state("failed");
  Heartbeat(failed);
  c().Tick();
  const std::vector<trainyard::v1::CollectiveReport> reports = Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].seq(), 57);
  EXPECT_THAT(reports[0].waiting(), ElementsAre(0));
}

TEST_F(CoordinatorCollectivesTest, JobListsLeaveTheReportsOut) {
  clock_.Advance(3s);
  Heartbeat(Waiting(0, 3000));
  Heartbeat(Waiting(2, 3000));
  c().Tick();
  ASSERT_EQ(Get().collectives_size(), 1);
  StatusOr<trainyard::v1::ListJobsResponse> list = c().ListJobs({});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs_size(), 1);
  EXPECT_EQ(list->jobs(0).collectives_size(), 0);
}

}  // namespace
}  // namespace trainyard::server
