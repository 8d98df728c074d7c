// How an attempt fails (server/coordinator_faults.cc): a job that makes no progress is hung
// whatever its world size, a failure repeated at the same step fails the job, and a rank that
// exits 0 before the last step failed.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/coordinator_testing.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using trainyard::v1::Job;
using trainyard::v1::RankStatus;
using trainyard::v1::WorkerCommand;

// A small MLP of 10 steps with a hang timeout of 5 s (under the 10 s heartbeat timeout, so a
// worker stays alive while the test moves the clock) and 5 restarts; `world` ranks.
std::string Spec(int world) {
  return R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
         R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":)" +
         std::to_string(world) +
         R"(},"fault_tolerance":{"hang_timeout_seconds":5,"max_restarts":5}})";
}

// `rank` of `attempt`, running in `phase` at `step`, as its worker reports it just now.
RankStatus Running(const std::string& id, int attempt, int rank, int64_t step = 4,
                   const std::string& phase = "forward") {
  RankStatus s;
  s.set_job_id(id);
  s.set_attempt(attempt);
  s.set_rank(rank);
  s.set_step(step);
  s.set_phase(phase);
  return s;
}

RankStatus Exited(const std::string& id, int attempt, int rank, int code, int64_t step) {
  RankStatus s = Running(id, attempt, rank, step, "done");
  s.set_exited(true);
  s.set_exit_code(code);
  if (code != 0) s.set_error("boom");
  return s;
}

// Rank 0 on worker a, rank 1 on worker b (one CPU slot each).
std::string WorkerOf(int rank) { return rank == 0 ? "a" : "b"; }

class CoordinatorFaultsTest : public CoordinatorFixture {
 protected:
  std::vector<WorkerCommand> Commands(const std::string& worker) {
    StatusOr<int64_t> incarnation = c().Incarnation(worker);
    if (!incarnation.ok()) return {};
    StatusOr<std::vector<WorkerCommand>> out = c().TakeCommands(worker, *incarnation);
    return out.ok() ? WithoutAcks(*std::move(out)) : std::vector<WorkerCommand>{};
  }

  void Heartbeat(const RankStatus& s) {
    trainyard::v1::WorkerHeartbeat hb;
    hb.set_name(WorkerOf(s.rank()));
    *hb.add_ranks() = s;
    Status st = c().Heartbeat(hb);
    EXPECT_TRUE(st.ok()) << st;
  }

  Job Get(const std::string& id) {
    StatusOr<Job> job = c().GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : Job();
  }

  // A job of `world` ranks, RUNNING in attempt 1.
  std::string Start(int world) {
    world_ = world;
    for (int rank = 0; rank < world; ++rank) Register(WorkerOf(rank));
    StatusOr<Job> job = c().Submit(Spec(world));
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return "";
    RunAttempt(job->id(), 1);
    return job->id();
  }

  // Places attempt `attempt` (the previous one's ranks have exited) and reports its ranks.
  void RunAttempt(const std::string& id, int attempt) {
    c().Tick();
    for (int rank = 0; rank < world_; ++rank) {
      Commands(WorkerOf(rank));
      Heartbeat(Running(id, attempt, rank));
    }
    ASSERT_EQ(Get(id).state(), trainyard::v1::RUNNING) << Get(id).reason();
    ASSERT_EQ(Get(id).attempts_size(), attempt);
  }

  // Rank 0 of `attempt` exits with `code` at `step`; the others are killed by the abort.
  void FailRankZero(const std::string& id, int attempt, int code, int64_t step) {
    Heartbeat(Exited(id, attempt, 0, code, step));
    for (int rank = 1; rank < world_; ++rank) Heartbeat(Exited(id, attempt, rank, 137, step));
  }

  // Attempt `attempt` of a one-rank job stays in phase data at `step` until it hangs.
  void HangOneRank(const std::string& id, int attempt, int64_t step) {
    clock_.Advance(6s);
    RankStatus stuck = Running(id, attempt, 0, step, "data");
    stuck.set_phase_age_ms(6000);
    stuck.set_collective_age_ms(6000);
    Heartbeat(stuck);
    c().Tick();
    Heartbeat(Exited(id, attempt, 0, 137, step));  // killed by the abort
  }

  trainyard::v1::MetricsReport StepReport(const std::string& id, int rank, int64_t step) {
    trainyard::v1::MetricsReport r;
    r.set_job_id(id);
    r.set_attempt(1);
    r.set_worker(WorkerOf(rank));
    r.mutable_step()->set_rank(rank);
    r.mutable_step()->set_step(step);
    r.mutable_step()->set_total_steps(10);
    return r;
  }

  int world_ = 1;
};

// ---- A job that makes no progress (Note [A job that makes no progress]) ----

TEST_F(CoordinatorFaultsTest, EveryRankStoppedIsAHangNamingEachRankAndTheAttemptRestarts) {
  const std::string id = Start(2);
  // SIGSTOP on both ranks: their workers keep heartbeating nothing new about them.
  clock_.Advance(4s);
  c().Tick();
  EXPECT_EQ(Get(id).state(), trainyard::v1::RUNNING) << "hung before the timeout";
  clock_.Advance(2s);
  c().Tick();

  const Job job = Get(id);
  ASSERT_EQ(job.diagnoses_size(), 1);
  const trainyard::v1::Diagnosis& d = job.diagnoses(0);
  EXPECT_EQ(d.kind(), trainyard::v1::Diagnosis::HANG);
  EXPECT_EQ(d.attempt(), 1);
  EXPECT_EQ(d.step(), 4);
  EXPECT_DOUBLE_EQ(d.seconds(), 6.0);
  EXPECT_THAT(d.message(), HasSubstr("no rank made progress for 6.0 s"));
  EXPECT_THAT(d.message(), HasSubstr("rank 0 on a (a.host) no report for 6.0 s, last in phase "
                                     "forward at step 4"));
  EXPECT_THAT(d.message(), HasSubstr("rank 1 on b (b.host) no report for 6.0 s"));
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_THAT(job.reason(), HasSubstr("no rank made progress"));
  for (const std::string worker : {"a", "b"}) {
    std::vector<WorkerCommand> commands = Commands(worker);
    ASSERT_EQ(commands.size(), 1u) << worker;
    EXPECT_TRUE(commands[0].has_abort()) << worker;
  }
}

TEST_F(CoordinatorFaultsTest, TheOnlyRankOfAOneRankJobStuckInAPhaseIsAHang) {
  const std::string id = Start(1);
  for (int64_t stuck_ms : {3000, 6000}) {
    clock_.Advance(3s);
    RankStatus s = Running(id, 1, 0, 4, "data");  // still reporting, never leaving "data"
    s.set_phase_age_ms(stuck_ms);
    s.set_collective_age_ms(stuck_ms);
    Heartbeat(s);
    c().Tick();
    if (stuck_ms < 5000) {
      EXPECT_EQ(Get(id).state(), trainyard::v1::RUNNING) << "hung too early";
    }
  }
  const Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  ASSERT_EQ(job.diagnoses_size(), 1);
  EXPECT_EQ(job.diagnoses(0).rank(), 0);
  EXPECT_EQ(job.diagnoses(0).worker(), "a");
  EXPECT_EQ(job.diagnoses(0).phase(), "data");
  EXPECT_THAT(job.diagnoses(0).message(),
              HasSubstr("rank 0 on a (a.host) in phase data for 6.0 s at step 4"));
}

TEST_F(CoordinatorFaultsTest, AOneRankJobThatKeepsChangingPhaseIsNotHung) {
  const std::string id = Start(1);
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(1s);
    RankStatus s = Running(id, 1, 0, 4 + i);
    s.set_phase_age_ms(200);
    s.set_collective_age_ms(20000);  // a single rank completes no collective
    Heartbeat(s);
    c().Tick();
  }
  EXPECT_EQ(Get(id).state(), trainyard::v1::RUNNING);
  EXPECT_EQ(Get(id).diagnoses_size(), 0);
}

TEST_F(CoordinatorFaultsTest, ALongEvaluationGetsTenTimesTheHangTimeout) {
  const std::string id = Start(1);
  for (int64_t ms = 5000; ms <= 50000; ms += 5000) {
    clock_.Advance(5s);
    RankStatus s = Running(id, 1, 0, 4, "evaluate");
    s.set_phase_age_ms(ms);
    s.set_collective_age_ms(ms);
    Heartbeat(s);
    c().Tick();
    if (ms < 50000) {
      ASSERT_EQ(Get(id).state(), trainyard::v1::RUNNING) << ms << " ms";
    }
  }
  EXPECT_EQ(Get(id).state(), trainyard::v1::RESTARTING);
  EXPECT_THAT(Get(id).reason(), HasSubstr("in phase evaluate for 50.0 s"));
}

// ---- The same failure at the same step in two attempts ----

TEST_F(CoordinatorFaultsTest, ARankFailingAtTheSameStepTwiceFailsTheJob) {
  const std::string id = Start(2);
  FailRankZero(id, 1, 1, 8);
  Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(job.attempts(0).failed_exit_code(), 1);
  EXPECT_EQ(job.attempts(0).failed_step(), 8);

  RunAttempt(id, 2);
  FailRankZero(id, 2, 1, 8);
  job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::FAILED);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_THAT(job.reason(), HasSubstr("rank 0 on a (a.host) exited with code 1: boom"));
  EXPECT_THAT(job.reason(), HasSubstr("the same failure repeated at step 8 in attempts 1 and 2"));
  EXPECT_EQ(job.attempts(1).failed_step(), 8);
  c().Tick();
  EXPECT_EQ(Get(id).attempts_size(), 2) << "a failed job was placed again";
}

TEST_F(CoordinatorFaultsTest, AFailureAtAnotherStepOrWithAnotherCodeRestartsAgain) {
  const std::string id = Start(2);
  FailRankZero(id, 1, 1, 8);
  RunAttempt(id, 2);
  FailRankZero(id, 2, 1, 9);  // another step
  EXPECT_EQ(Get(id).state(), trainyard::v1::RESTARTING);
  RunAttempt(id, 3);
  FailRankZero(id, 3, 139, 9);  // another failure (SIGSEGV) at the same step
  const Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(job.restarts(), 3);
}

TEST_F(CoordinatorFaultsTest, AFailureAtAnUnknownStepKeepsRestarting) {
  const std::string id = Start(2);
  FailRankZero(id, 1, 1, 0);  // before its first step
  RunAttempt(id, 2);
  FailRankZero(id, 2, 1, 0);
  const Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(job.restarts(), 2);
  EXPECT_THAT(job.reason(), Not(HasSubstr("same failure")));
}

TEST_F(CoordinatorFaultsTest, AHangAtTheSameStepTwiceFailsTheJob) {
  const std::string id = Start(1);
  HangOneRank(id, 1, 4);
  Job job = Get(id);
  ASSERT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(job.attempts(0).failed_exit_code(), 0);
  EXPECT_EQ(job.attempts(0).failed_step(), 4);

  RunAttempt(id, 2);
  HangOneRank(id, 2, 4);
  job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("in phase data for 6.0 s at step 4"));
  EXPECT_THAT(job.reason(), HasSubstr("the same failure repeated at step 4 in attempts 1 and 2"));
}

// ---- An exit 0 before the last step ----

TEST_F(CoordinatorFaultsTest, ARankExitingZeroBeforeTheLastStepFailsTheAttempt) {
  const std::string id = Start(2);
  ASSERT_TRUE(c().ReportMetrics(StepReport(id, 0, 3)).ok());  // the run is 10 steps long
  Heartbeat(Exited(id, 1, 0, 0, 3));
  const Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_THAT(job.reason(), HasSubstr("rank 0 on a (a.host) exited 0 at step 3 of 10: before the "
                                      "last step"));
  EXPECT_EQ(job.attempts(0).failed_exit_code(), 0);
  EXPECT_EQ(job.attempts(0).failed_step(), 3);
  std::vector<WorkerCommand> commands = Commands("b");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());
}

TEST_F(CoordinatorFaultsTest, TheRunsLengthMayComeFromTheRankStatus) {
  const std::string id = Start(1);
  RankStatus s = Exited(id, 1, 0, 0, 7);
  s.set_total_steps(10);
  Heartbeat(s);
  EXPECT_EQ(Get(id).state(), trainyard::v1::RESTARTING);
  EXPECT_THAT(Get(id).reason(), HasSubstr("exited 0 at step 7 of 10: before the last step"));
}

TEST_F(CoordinatorFaultsTest, RanksExitingZeroAtTheLastStepSucceed) {
  const std::string id = Start(2);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(c().ReportMetrics(StepReport(id, rank, 9)).ok());
    Heartbeat(Exited(id, 1, rank, 0, 10));  // its status has the last step
  }
  EXPECT_EQ(Get(id).state(), trainyard::v1::SUCCEEDED);
}

TEST_F(CoordinatorFaultsTest, RanksOfACancelledJobExitingZeroEarlyLeaveItCancelled) {
  const std::string id = Start(2);
  for (int rank = 0; rank < 2; ++rank) ASSERT_TRUE(c().ReportMetrics(StepReport(id, rank, 3)).ok());
  ASSERT_TRUE(c().Cancel(id, /*checkpoint=*/true).ok());
  for (int rank = 0; rank < 2; ++rank) Heartbeat(Exited(id, 1, rank, 0, 3));
  EXPECT_EQ(Get(id).state(), trainyard::v1::RUNNING) << Get(id).reason();
  c().Tick();
  const Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::CANCELLED);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(job.attempts(0).failed_step(), 0);
}

}  // namespace
}  // namespace trainyard::server
