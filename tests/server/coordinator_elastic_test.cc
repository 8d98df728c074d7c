// Elastic jobs (server/coordinator_elastic.cc, Note [Regroups]): placement between
// min_world_size and max_world_size, regroups instead of restarts when a rank is lost, the
// quorum window of `regrouping` reports, growing into free slots, and what stays as before.
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/coordinator_testing.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using trainyard::v1::Job;
using trainyard::v1::RankStatus;
using trainyard::v1::WorkerCommand;

// 10 steps of a small MLP, world_size 3 (the global batch), elastic between 2 and 3 ranks,
// a hang timeout of 30 s (past the 10 s heartbeat timeout) unless `hang_seconds`.
std::string Spec(int hang_seconds = 30) {
  return R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
         R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":3,)"
         R"("min_world_size":2,"max_world_size":3},"fault_tolerance":{"hang_timeout_seconds":)" +
         std::to_string(hang_seconds) + R"(,"max_restarts":5}})";
}

RankStatus Running(const std::string& id, int attempt, int rank, int64_t step = 4) {
  RankStatus s;
  s.set_job_id(id);
  s.set_attempt(attempt);
  s.set_rank(rank);
  s.set_step(step);
  s.set_phase("forward");
  return s;
}

RankStatus Regrouping(const std::string& id, int attempt, int rank) {
  RankStatus s = Running(id, attempt, rank);
  s.set_regrouping(true);
  s.set_group_error("connection reset by peer");
  return s;
}

RankStatus Exited(const std::string& id, int attempt, int rank, int code, int64_t step) {
  RankStatus s = Running(id, attempt, rank, step);
  s.set_exited(true);
  s.set_exit_code(code);
  return s;
}

class CoordinatorElasticTest : public CoordinatorFixture {
 protected:
  std::vector<WorkerCommand> Commands(const std::string& worker) {
    StatusOr<int64_t> incarnation = c().Incarnation(worker);
    if (!incarnation.ok()) return {};
    StatusOr<std::vector<WorkerCommand>> out = c().TakeCommands(worker, *incarnation);
    return out.ok() ? WithoutAcks(*std::move(out)) : std::vector<WorkerCommand>{};
  }
  // The one command waiting for `worker` (a default one, failing the test, otherwise).
  WorkerCommand OnlyCommand(const std::string& worker) {
    std::vector<WorkerCommand> commands = Commands(worker);
    EXPECT_EQ(commands.size(), 1u) << worker;
    return commands.empty() ? WorkerCommand() : commands[0];
  }

  void Heartbeat(const std::string& worker, std::vector<RankStatus> ranks = {}) {
    trainyard::v1::WorkerHeartbeat hb;
    hb.set_name(worker);
    for (RankStatus& s : ranks) *hb.add_ranks() = std::move(s);
    Status st = c().Heartbeat(hb);
    EXPECT_TRUE(st.ok()) << st;
  }

  Job Get(const std::string& id) {
    StatusOr<Job> job = c().GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : Job();
  }

  // The worker each rank of the job's current attempt runs on.
  std::map<int, std::string> Workers(const std::string& id) {
    std::map<int, std::string> out;
    const Job job = Get(id);
    for (const auto& p : job.attempts(job.attempts_size() - 1).ranks()) out[p.rank()] = p.worker();
    return out;
  }

  // Every rank of the current attempt reports `step` (and rank 0 its metrics).
  void ReportAll(const std::string& id, int64_t step = 4) {
    const int attempt = Get(id).attempts_size();
    for (const auto& [rank, worker] : Workers(id)) Heartbeat(worker, {Running(id, attempt, rank)});
    trainyard::v1::MetricsReport r;
    r.set_job_id(id);
    r.set_attempt(attempt);
    r.set_worker(Workers(id)[0]);
    r.mutable_step()->set_step(step);
    r.mutable_step()->set_total_steps(10);
    EXPECT_TRUE(c().ReportMetrics(r).ok());
  }

  // Workers w0..w<n-1> (one slot each) and the elastic job RUNNING on them in attempt 1.
  std::string Start(int workers, int hang_seconds = 30) {
    for (int i = 0; i < workers; ++i) Register("w" + std::to_string(i));
    StatusOr<Job> job = c().Submit(Spec(hang_seconds));
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return "";
    c().Tick();
    for (int i = 0; i < workers; ++i) Commands("w" + std::to_string(i));
    ReportAll(job->id());
    EXPECT_EQ(Get(job->id()).state(), trainyard::v1::RUNNING) << Get(job->id()).reason();
    return job->id();
  }

  // Moves the clock past the heartbeat timeout; the workers but `lost` heartbeat meanwhile.
  void LoseWorker(const std::string& lost, int workers) {
    for (int half = 0; half < 2; ++half) {
      clock_.Advance(c().options().heartbeat_timeout / 2 + 1s);
      for (int i = 0; i < workers; ++i) {
        if ("w" + std::to_string(i) != lost) Heartbeat("w" + std::to_string(i));
      }
    }
    c().Tick();
  }

  // `cmd` is a Regroup from attempt `from` to from + 1 of `world` ranks with these remaps.
  void ExpectRegroup(const WorkerCommand& cmd, int from, int world,
                     std::vector<std::pair<int, int>> remaps, bool at_step_boundary) {
    ASSERT_TRUE(cmd.has_regroup()) << cmd.DebugString();
    const trainyard::v1::Regroup& g = cmd.regroup();
    EXPECT_EQ(g.from_attempt(), from);
    EXPECT_EQ(g.attempt(), from + 1);
    EXPECT_EQ(g.world_size(), world);
    EXPECT_EQ(g.at_step_boundary(), at_step_boundary);
    EXPECT_EQ(g.secret().size(), 32u);
    std::vector<std::pair<int, int>> got;
    for (const auto& r : g.ranks()) got.push_back({r.from_rank(), r.rank()});
    EXPECT_EQ(got, remaps);
  }

  // The job regrouped into attempt `attempt` of `world` ranks without a restart.
  void ExpectRegrouped(const std::string& id, int attempt, int world, int regroups) {
    const Job job = Get(id);
    EXPECT_EQ(job.state(), trainyard::v1::RUNNING) << job.reason();
    ASSERT_EQ(job.attempts_size(), attempt);
    EXPECT_TRUE(job.attempts(attempt - 1).regrouped());
    EXPECT_EQ(job.attempts(attempt - 1).ranks_size(), world);
    EXPECT_NE(job.attempts(attempt - 2).ended_ms(), 0);
    EXPECT_EQ(job.restarts(), 0);
    EXPECT_EQ(job.regroups(), regroups);
    EXPECT_EQ(job.current_world_size(), world);
    EXPECT_EQ(job.world_size(), 3) << "the nominal size, which sets the global batch";
    EXPECT_THAT(job.reason(), HasSubstr("regrouped into attempt " + std::to_string(attempt) +
                                        " with " + std::to_string(world) + " ranks"));
  }
};

TEST_F(CoordinatorElasticTest, StartsWithWhatIsFreeBetweenMinAndMax) {
  Register("w0");
  Register("w1");
  std::string one_rank = Spec();
  one_rank.replace(one_rank.find(R"("world_size":3,"min_world_size":2,"max_world_size":3)"), 52,
                   R"("world_size":1)");
  ASSERT_TRUE(c().Submit(one_rank).ok());
  c().Tick();  // it takes w0
  StatusOr<Job> job = c().Submit(Spec());
  ASSERT_TRUE(job.ok()) << job.status();
  c().Tick();
  EXPECT_EQ(Get(job->id()).state(), trainyard::v1::PENDING) << "1 free slot, under min 2";

  Register("w2");
  c().Tick();
  const Job placed = Get(job->id());
  EXPECT_EQ(placed.state(), trainyard::v1::SCHEDULED);
  EXPECT_EQ(placed.current_world_size(), 2);
  ASSERT_EQ(placed.attempts_size(), 1);
  EXPECT_EQ(placed.attempts(0).ranks_size(), 2);
  const WorkerCommand assign = OnlyCommand("w2");
  ASSERT_TRUE(assign.has_assign());
  EXPECT_EQ(assign.assign().world_size(), 2) << "the attempt's size, not the spec's 3";
}

TEST_F(CoordinatorElasticTest, PrefersMoreRanksUpToMax) {
  const std::string id = Start(4);
  EXPECT_EQ(Get(id).current_world_size(), 3);
  EXPECT_TRUE(Commands("w3").empty()) << "max_world_size is 3";
}

TEST_F(CoordinatorElasticTest, ALostWorkerRegroupsTheOthersWithoutARestart) {
  const std::string id = Start(3);
  LoseWorker("w1", 3);
  ExpectRegrouped(id, 2, 2, 1);
  EXPECT_THAT(Get(id).reason(), HasSubstr("worker w1 (w1.host) lost"));
  ExpectRegroup(OnlyCommand("w0"), 1, 2, {{0, 0}}, false);
  ExpectRegroup(OnlyCommand("w2"), 1, 2, {{2, 1}}, false);
  EXPECT_EQ(Workers(id), (std::map<int, std::string>{{0, "w0"}, {1, "w2"}}));
}

TEST_F(CoordinatorElasticTest, ARankThatExitsNonZeroIsLeftOutAndTheOthersRegroup) {
  const std::string id = Start(3);
  Heartbeat("w0", {Exited(id, 1, 0, 137, 4)});
  ExpectRegrouped(id, 2, 2, 1);
  EXPECT_THAT(Get(id).reason(), HasSubstr("rank 0 on w0 (w0.host) was killed by signal 9"));
  EXPECT_TRUE(Commands("w0").empty()) << "its rank exited: nothing to stop there";
  ExpectRegroup(OnlyCommand("w1"), 1, 2, {{1, 0}}, false);
  ExpectRegroup(OnlyCommand("w2"), 1, 2, {{2, 1}}, false);
}

TEST_F(CoordinatorElasticTest, ExitCodeTwoStillFailsTheJob) {
  const std::string id = Start(3);
  Heartbeat("w1", {Exited(id, 1, 1, 2, 4)});
  EXPECT_EQ(Get(id).state(), trainyard::v1::FAILED);
  EXPECT_EQ(Get(id).regroups(), 0);
}

TEST_F(CoordinatorElasticTest, RegroupingReportsRegroupTheReportersAfterTheQuorumWindow) {
  const std::string id = Start(3);
  // Rank 1 is stopped (SIGSTOP): its worker reports it, but not as regrouping.
  Heartbeat("w0", {Regrouping(id, 1, 0)});
  Heartbeat("w2", {Regrouping(id, 1, 2)});
  Heartbeat("w1", {Running(id, 1, 1)});
  clock_.Advance(1500ms);
  c().Tick();
  EXPECT_EQ(Get(id).attempts_size(), 1) << "within the window of 2 heartbeat intervals";
  clock_.Advance(600ms);
  c().Tick();
  ExpectRegrouped(id, 2, 2, 1);
  EXPECT_THAT(Get(id).reason(), HasSubstr("connection reset by peer"));
  EXPECT_THAT(Get(id).reason(), HasSubstr("left out, silent: rank 1 on w1 (w1.host)"));
  ExpectRegroup(OnlyCommand("w0"), 1, 2, {{0, 0}}, false);
  ExpectRegroup(OnlyCommand("w2"), 1, 2, {{2, 1}}, false);
  const WorkerCommand stop = OnlyCommand("w1");
  ASSERT_TRUE(stop.has_abort()) << stop.DebugString();
  EXPECT_EQ(stop.abort().attempt(), 1);
  EXPECT_FALSE(stop.abort().checkpoint());
}

TEST_F(CoordinatorElasticTest, TheQuorumWindowClosesOnceEveryRankReported) {
  const std::string id = Start(3);
  for (int rank = 0; rank < 3; ++rank)
    Heartbeat("w" + std::to_string(rank), {Regrouping(id, 1, rank)});
  c().Tick();
  ExpectRegrouped(id, 2, 3, 1);
  ExpectRegroup(OnlyCommand("w1"), 1, 3, {{1, 1}}, false);
}

TEST_F(CoordinatorElasticTest, BelowMinWorldSizeTheJobRestartsFromItsCheckpoint) {
  const std::string id = Start(2);
  LoseWorker("w1", 2);
  const Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING) << job.reason();
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.regroups(), 0);
  EXPECT_THAT(job.reason(), HasSubstr("from the latest checkpoint"));
  EXPECT_TRUE(OnlyCommand("w0").has_abort());
}

TEST_F(CoordinatorElasticTest, AHungRankIsLeftOutAndTheOthersRegroup) {
  const std::string id = Start(3, /*hang_seconds=*/5);
  clock_.Advance(6s);
  // Rank 2 stopped in its data phase; the others wait in collective #5 for it.
  RankStatus stuck = Running(id, 1, 2);
  stuck.set_phase("data");
  stuck.set_phase_age_ms(6000);
  stuck.set_collective_age_ms(6000);
  stuck.set_collectives_done(4);
  stuck.set_collectives_issued(4);
  for (int rank : {0, 1}) {
    RankStatus waiting = Running(id, 1, rank);
    waiting.set_phase("allreduce_wait");
    waiting.set_collectives_issued(5);
    waiting.set_collectives_done(4);
    waiting.set_collective_age_ms(6000);
    Heartbeat("w" + std::to_string(rank), {waiting});
  }
  Heartbeat("w2", {stuck});
  c().Tick();
  const Job job = Get(id);
  ASSERT_EQ(job.diagnoses_size(), 1);
  ASSERT_EQ(job.diagnoses(0).rank(), 2) << job.diagnoses(0).message();
  ExpectRegrouped(id, 2, 2, 1);
  ExpectRegroup(OnlyCommand("w0"), 1, 2, {{0, 0}}, false);
  EXPECT_TRUE(OnlyCommand("w2").has_abort()) << "the hung rank is stopped";
}

TEST_F(CoordinatorElasticTest, GrowsIntoAWorkerThatRegistersAtAStepBoundary) {
  const std::string id = Start(2);
  Register("w2");
  c().Tick();
  ExpectRegrouped(id, 2, 3, 1);
  ExpectRegroup(OnlyCommand("w0"), 1, 3, {{0, 0}}, true);
  ExpectRegroup(OnlyCommand("w1"), 1, 3, {{1, 1}}, true);
  const WorkerCommand assign = OnlyCommand("w2");
  ASSERT_TRUE(assign.has_assign()) << assign.DebugString();
  EXPECT_EQ(assign.assign().attempt(), 2);
  EXPECT_EQ(assign.assign().world_size(), 3);
  ASSERT_EQ(assign.assign().ranks_size(), 1);
  EXPECT_EQ(assign.assign().ranks(0).rank(), 2);
  c().Tick();
  EXPECT_EQ(Get(id).attempts_size(), 2) << "at max_world_size: no more growing";
}

// A worker that a regroup left out may be dead yet not declared lost: no growing onto it
// until it registers again (or the heartbeat timeout passes).
TEST_F(CoordinatorElasticTest, DoesNotGrowOntoTheWorkerOfARankLeftOutUntilItRegistersAgain) {
  const std::string id = Start(3);
  Heartbeat("w0", {Regrouping(id, 1, 0)});
  Heartbeat("w2", {Regrouping(id, 1, 2)});
  clock_.Advance(2100ms);
  c().Tick();
  ExpectRegrouped(id, 2, 2, 1);
  ReportAll(id, 5);
  c().Tick();
  EXPECT_EQ(Get(id).attempts_size(), 2) << "w1 is free but suspect";
  Register("w1");
  c().Tick();
  ExpectRegrouped(id, 3, 3, 2);
}

// A worker that registers again without a rank the grow gave it (the assignment was lost
// with its stream) gets the assignment again; one without a running member regroups.
TEST_F(CoordinatorElasticTest, AWorkerBackWithoutItsRanksGetsTheAssignmentOrIsRegroupedAround) {
  const std::string id = Start(2);
  Register("w2");
  c().Tick();
  ExpectRegrouped(id, 2, 3, 1);
  Commands("w2");
  Register("w2");  // the Assignment was lost with the stream
  const WorkerCommand again = OnlyCommand("w2");
  ASSERT_TRUE(again.has_assign()) << again.DebugString();
  EXPECT_EQ(again.assign().attempt(), 2);

  ReportAll(id, 6);  // every rank of attempt 2 runs
  Register("w1");    // its daemon restarted: rank 1 is gone
  ExpectRegrouped(id, 3, 2, 2);
  EXPECT_THAT(Get(id).reason(), HasSubstr("worker w1 (w1.host) came back without rank 1"));
}

TEST_F(CoordinatorElasticTest, DoesNotGrowBeforeAStepOfTheAttempt) {
  const std::string id = Start(3);
  LoseWorker("w1", 3);
  ExpectRegrouped(id, 2, 2, 1);
  Register("w1");
  c().Tick();
  EXPECT_EQ(Get(id).attempts_size(), 2) << "attempt 2 has not completed a step yet";
  ReportAll(id, 5);
  c().Tick();
  ExpectRegrouped(id, 3, 3, 2);
}

TEST_F(CoordinatorElasticTest, ARegroupedJobSucceedsWhenItsRanksExitZeroAtTheLastStep) {
  const std::string id = Start(3);
  Heartbeat("w1", {Exited(id, 1, 1, 137, 4)});
  ExpectRegrouped(id, 2, 2, 1);
  Heartbeat("w0", {Exited(id, 2, 0, 0, 10)});
  EXPECT_EQ(Get(id).state(), trainyard::v1::RUNNING);
  Heartbeat("w2", {Exited(id, 2, 1, 0, 10)});
  EXPECT_EQ(Get(id).state(), trainyard::v1::SUCCEEDED) << Get(id).reason();
  EXPECT_EQ(Get(id).restarts(), 0);
}

// Stale reports are refused, but for a member's step that the old group finished after the
// regroup was decided (a later step than the job's last): it is the job's next step.
TEST_F(CoordinatorElasticTest, ReportsOfTheAttemptBeforeARegroupAreRefusedButAMembersLaterStep) {
  const std::string id = Start(3);  // rank 0 reported step 4
  Heartbeat("w1", {Exited(id, 1, 1, 137, 4)});
  ExpectRegrouped(id, 2, 2, 1);
  trainyard::v1::MetricsReport old;
  old.set_job_id(id);
  old.set_attempt(1);
  old.set_worker("w0");
  old.mutable_step()->set_step(4);
  const Status refused = c().ReportMetrics(old);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("attempt 1 is over; the job is at attempt 2"));

  old.mutable_step()->set_step(5);
  EXPECT_TRUE(c().ReportMetrics(old).ok()) << "rank 0 of attempt 1 is rank 0 of attempt 2";
  EXPECT_EQ(Get(id).last_step().step(), 5);
  trainyard::v1::MetricsReport lost = old;
  lost.set_worker("w1");
  lost.mutable_step()->set_rank(1);
  lost.mutable_step()->set_step(6);
  EXPECT_EQ(c().ReportMetrics(lost).code(), StatusCode::kFailedPrecondition) << "not a member";
  trainyard::v1::MetricsReport current = old;
  current.set_attempt(2);
  current.mutable_step()->set_step(6);
  EXPECT_TRUE(c().ReportMetrics(current).ok());
  EXPECT_EQ(Get(id).last_step().step(), 6);
}

TEST_F(CoordinatorElasticTest, AJobThatIsNotElasticStillRestarts) {
  Register("w0");
  Register("w1");
  std::string spec = Spec();
  spec.replace(spec.find(R"("min_world_size":2,"max_world_size":3)"), 37,
               R"("min_world_size":0,"max_world_size":0)");
  spec.replace(spec.find(R"("world_size":3)"), 14, R"("world_size":2)");
  StatusOr<Job> job = c().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  c().Tick();
  Heartbeat("w0", {Running(job->id(), 1, 0)});
  Heartbeat("w1", {Exited(job->id(), 1, 1, 137, 4)});
  EXPECT_EQ(Get(job->id()).state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(Get(job->id()).regroups(), 0);
}

}  // namespace
}  // namespace trainyard::server
