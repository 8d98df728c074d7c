// Coordinator, fencing (coordinator.h): the worker lease it names and renews with an
// acknowledgement per heartbeat, and the refusal of a stale attempt's metrics reports.
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/coordinator_metrics.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using trainyard::v1::MetricsReport;
using trainyard::v1::RankStatus;
using trainyard::v1::WorkerCommand;

constexpr char kSpec[] =
    R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
    R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":2}})";

RankStatus Rank(const std::string& job_id, int attempt, int rank, bool exited = false) {
  RankStatus s;
  s.set_job_id(job_id);
  s.set_attempt(attempt);
  s.set_rank(rank);
  s.set_exited(exited);
  s.set_exit_code(exited ? 137 : 0);
  return s;
}

MetricsReport StepReport(const std::string& job_id, int attempt, int rank, int64_t step,
                         const std::string& worker) {
  MetricsReport r;
  r.set_job_id(job_id);
  r.set_attempt(attempt);
  r.set_worker(worker);
  r.mutable_step()->set_rank(rank);
  r.mutable_step()->set_step(step);
  r.mutable_step()->set_total_steps(10);
  return r;
}

class CoordinatorFencingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.heartbeat_timeout = 4000ms;
    auto c = Coordinator::Create(NewMemoryJobStore(), &clock_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }

  trainyard::v1::RegisterWorkerResponse Register(const std::string& name) {
    trainyard::v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_host(name + ".host");
    req.set_cpu_slots(1);
    auto r = c_->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : trainyard::v1::RegisterWorkerResponse();
  }

  void Heartbeat(const std::string& worker, const std::vector<RankStatus>& ranks = {}) {
    trainyard::v1::WorkerHeartbeat hb;
    hb.set_name(worker);
    for (const RankStatus& s : ranks) *hb.add_ranks() = s;
    Status s = c_->Heartbeat(hb);
    EXPECT_TRUE(s.ok()) << s;
  }

  // Everything waiting for `worker`, acknowledgements included.
  std::vector<WorkerCommand> Take(const std::string& worker) {
    auto incarnation = c_->Incarnation(worker);
    EXPECT_TRUE(incarnation.ok()) << incarnation.status();
    if (!incarnation.ok()) return {};
    auto out = c_->TakeCommands(worker, *incarnation);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : std::vector<WorkerCommand>{};
  }

  // A job of two ranks on a and b, whose attempt 1 failed (rank 1 was killed) and whose
  // attempt 2 is running; the outboxes are empty.
  std::string JobAtAttemptTwo() {
    Register("a");
    Register("b");
    auto job = c_->Submit(kSpec);
    EXPECT_TRUE(job.ok()) << job.status();
    const std::string id = job->id();
    c_->Tick();
    Heartbeat("a", {Rank(id, 1, 0)});
    Heartbeat("b", {Rank(id, 1, 1, /*exited=*/true)});
    Heartbeat("a", {Rank(id, 1, 0, /*exited=*/true)});
    c_->Tick();
    Heartbeat("a", {Rank(id, 2, 0)});
    Heartbeat("b", {Rank(id, 2, 1)});
    EXPECT_EQ(c_->GetJob(id)->state(), trainyard::v1::RUNNING);
    EXPECT_EQ(c_->GetJob(id)->attempts_size(), 2);
    Take("a");
    Take("b");
    return id;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> c_;
};

TEST_F(CoordinatorFencingTest, RegistrationNamesALeaseOfThreeQuartersOfTheHeartbeatTimeout) {
  EXPECT_EQ(Register("a").lease_ms(), 3000);
  EXPECT_EQ(LeaseOf(CoordinatorOptions{}), 7500ms);
}

TEST_F(CoordinatorFencingTest, EveryHeartbeatQueuesAnAckCarryingTheLease) {
  Register("a");
  EXPECT_TRUE(Take("a").empty());
  Heartbeat("a");
  std::vector<WorkerCommand> commands = Take("a");
  ASSERT_EQ(commands.size(), 1u);
  ASSERT_TRUE(commands[0].has_ack());
  EXPECT_EQ(commands[0].ack().lease_ms(), 3000);
  EXPECT_TRUE(Take("a").empty()) << "an ack was taken twice";
  Heartbeat("a");
  EXPECT_EQ(Take("a").size(), 1u) << "the next heartbeat was not acknowledged";
}

TEST_F(CoordinatorFencingTest, AcksWaitingInTheOutboxAreNotPiledUp) {
  Register("a");
  Heartbeat("a");
  Heartbeat("a");
  Heartbeat("a");
  std::vector<WorkerCommand> commands = Take("a");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_ack());
}

TEST_F(CoordinatorFencingTest, AnAckFollowsTheCommandsAHeartbeatCaused) {
  Register("a");
  Register("b");
  auto job = c_->Submit(kSpec);
  ASSERT_TRUE(job.ok());
  c_->Tick();
  // A heartbeat naming a rank of an unknown attempt: the abort, then the ack, in one take.
  Heartbeat("a", {Rank(job->id(), 7, 0)});
  std::vector<WorkerCommand> commands = Take("a");
  ASSERT_EQ(commands.size(), 3u);  // the assignment of attempt 1, the abort, the ack
  EXPECT_TRUE(commands[0].has_assign());
  EXPECT_TRUE(commands[1].has_abort());
  EXPECT_EQ(commands[1].abort().attempt(), 7);
  EXPECT_TRUE(commands[2].has_ack());
}

TEST_F(CoordinatorFencingTest, AStaleAttemptsReportIsRefusedNamingTheJobAndBothAttempts) {
  const std::string id = JobAtAttemptTwo();
  const int64_t step_before = c_->GetJob(id)->last_step().step();
  Status s = c_->ReportMetrics(StepReport(id, 1, 0, 99, "a"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "metrics report of job " + id +
                             " attempt 1 refused: attempt 1 is over; the job is at attempt 2");
  EXPECT_EQ(c_->GetJob(id)->last_step().step(), step_before) << "a stale step moved the job";

  // A stale checkpoint report does not replace the job's checkpoint either.
  MetricsReport checkpoint;
  checkpoint.set_job_id(id);
  checkpoint.set_attempt(1);
  checkpoint.set_worker("a");
  checkpoint.set_checkpoint("/ckpt/step-00000120");
  EXPECT_EQ(c_->ReportMetrics(checkpoint).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c_->GetJob(id)->checkpoint(), "");

  // The current attempt's reports go on as before.
  EXPECT_TRUE(c_->ReportMetrics(StepReport(id, 2, 0, 3, "a")).ok());
  EXPECT_EQ(c_->GetJob(id)->last_step().step(), 3);
  EXPECT_EQ(c_->ReportMetrics(StepReport("nope-1", 1, 0, 3, "a")).code(), StatusCode::kNotFound);
}

TEST_F(CoordinatorFencingTest, StaleReportsAreCountedEachAndTheWorkerToldOncePerAttempt) {
  const std::string id = JobAtAttemptTwo();
  for (int step = 1; step <= 5; ++step) {
    EXPECT_EQ(c_->ReportMetrics(StepReport(id, 1, 0, step, "a")).code(),
              StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(c_->GetSnapshot().stale_reports, 5);
  std::vector<WorkerCommand> commands = Take("a");
  ASSERT_EQ(commands.size(), 1u) << "one abort per stale attempt, not one per report";
  ASSERT_TRUE(commands[0].has_abort());
  EXPECT_EQ(commands[0].abort().job_id(), id);
  EXPECT_EQ(commands[0].abort().attempt(), 1);
  EXPECT_FALSE(commands[0].abort().checkpoint());

  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  metrics.Update(c_->GetSnapshot());
  metrics.Update(c_->GetSnapshot());  // the counter follows the total; it does not add it twice
  double counted = -1;
  for (const auto& family : registry.Collect()) {
    if (family.name == "trainyard_stale_reports_total") counted = family.metric[0].counter.value;
  }
  EXPECT_EQ(counted, 5);
}

TEST(AddRefusalTest, ListsEachReasonOnceAndAtMostSixteen) {
  trainyard::v1::ReportMetricsResponse resp;
  for (int i = 0; i < 3; ++i) AddRefusal(&resp, FailedPreconditionError("attempt 1 is over"));
  EXPECT_EQ(resp.refused_size(), 1);
  for (int i = 0; i < 40; ++i) {
    AddRefusal(&resp, FailedPreconditionError("attempt " + std::to_string(i + 2)));
  }
  EXPECT_EQ(resp.refused_size(), 16);
  EXPECT_THAT(resp.refused(0), HasSubstr("attempt 1 is over"));
}

}  // namespace
}  // namespace trainyard::server
