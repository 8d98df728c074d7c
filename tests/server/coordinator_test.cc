#include "server/coordinator.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/coordinator_testing.h"
#include "tests/testing/temp_dir.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using namespace std::chrono_literals;
using trainyard::v1::JobEvent;
using trainyard::v1::RankStatus;
using trainyard::v1::WorkerCommand;

// Two ranks of a small MLP; the tests change one thing at a time.
constexpr char kSpec[] =
    R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
    R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":2}})";

// kSpec with a hang timeout of 5 s.
constexpr char kHangSpec[] =
    R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
    R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":2},)"
    R"("fault_tolerance":{"hang_timeout_seconds":5}})";

// Bounds a watcher's wait; events arrive synchronously, so a passing test never waits.
constexpr auto kWait = 5s;

RankStatus Rank(const std::string& job_id, int attempt, int rank) {
  RankStatus s;
  s.set_job_id(job_id);
  s.set_attempt(attempt);
  s.set_rank(rank);
  s.set_phase("forward");
  return s;
}

RankStatus Exited(const std::string& job_id, int attempt, int rank, int code) {
  RankStatus s = Rank(job_id, attempt, rank);
  s.set_phase("done");
  s.set_exited(true);
  s.set_exit_code(code);
  return s;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(NewMemoryJobStore()); }

  void Start(std::unique_ptr<JobStore> store) {
    coordinator_.reset();
    StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(store), &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
  }

  Coordinator& c() { return *coordinator_; }

  void Register(const std::string& name, int cpu_slots = 1) {
    trainyard::v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_host(name + ".host");
    req.set_cpu_slots(cpu_slots);
    StatusOr<trainyard::v1::RegisterWorkerResponse> r = c().RegisterWorker(req);
    ASSERT_TRUE(r.ok()) << r.status();
  }

  // The commands waiting for `worker`, taken without waiting.
  std::vector<WorkerCommand> Commands(const std::string& worker) {
    StatusOr<int64_t> incarnation = c().Incarnation(worker);
    EXPECT_TRUE(incarnation.ok()) << incarnation.status();
    if (!incarnation.ok()) return {};
    StatusOr<std::vector<WorkerCommand>> out = c().TakeCommands(worker, *incarnation);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? WithoutAcks(*std::move(out)) : std::vector<WorkerCommand>{};
  }

  void Heartbeat(const std::string& worker, const std::vector<RankStatus>& ranks) {
    trainyard::v1::WorkerHeartbeat hb;
    hb.set_name(worker);
    for (const RankStatus& s : ranks) *hb.add_ranks() = s;
    Status s = c().Heartbeat(hb);
    EXPECT_TRUE(s.ok()) << s;
  }

  std::string Submit(const std::string& spec = kSpec) {
    StatusOr<trainyard::v1::Job> job = c().Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return "";
    EXPECT_EQ(job->state(), trainyard::v1::PENDING);
    return job->id();
  }

  trainyard::v1::Job Get(const std::string& id) {
    StatusOr<trainyard::v1::Job> job = c().GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : trainyard::v1::Job();
  }

  trainyard::v1::JobState State(const std::string& id) { return Get(id).state(); }

  // Workers a and b (one CPU slot each) and a job of two ranks on them: rank 0 on a, rank 1
  // on b. Leaves the job SCHEDULED (running = false) or RUNNING, with the outboxes empty.
  std::string StartJob(bool running = true, const std::string& spec = kSpec) {
    Register("a");
    Register("b");
    const std::string id = Submit(spec);
    c().Tick();
    EXPECT_EQ(State(id), trainyard::v1::SCHEDULED);
    EXPECT_EQ(Commands("a").size(), 1u);
    EXPECT_EQ(Commands("b").size(), 1u);
    if (running) {
      Heartbeat("a", {Rank(id, 1, 0)});
      Heartbeat("b", {Rank(id, 1, 1)});
      EXPECT_EQ(State(id), trainyard::v1::RUNNING);
    }
    return id;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorTest, SubmitWithNoWorkersIsFailedPrecondition) {
  StatusOr<trainyard::v1::Job> job = c().Submit(kSpec);
  EXPECT_EQ(job.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(job.status().message(), HasSubstr("no worker is registered"));
}

TEST_F(CoordinatorTest, SubmitOfAJobTooLargeForEveryWorkerIsFailedPrecondition) {
  Register("a");
  StatusOr<trainyard::v1::Job> job = c().Submit(kSpec);
  EXPECT_EQ(job.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(job.status().message(), HasSubstr("parallelism.world_size = 2 needs 2 CPU slots"));
}

TEST_F(CoordinatorTest, InvalidSpecIsInvalidArgumentNamingTheField) {
  Register("a");
  std::string spec = kSpec;
  spec.replace(spec.find("\"world_size\":2"), 14, "\"world_size\":0");
  StatusOr<trainyard::v1::Job> job = c().Submit(spec);
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("parallelism.world_size = 0"));

  job = c().Submit("{not json");
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("not JSON"));
}

TEST_F(CoordinatorTest, TickPlacesAPendingJobWithOneAssignmentPerWorker) {
  Register("a");
  Register("b");
  const std::string id = Submit();
  EXPECT_EQ(id, "t-1");
  EXPECT_EQ(State(id), trainyard::v1::PENDING);
  EXPECT_THAT(Commands("a"), IsEmpty()) << "placed before Tick";

  c().Tick();
  const trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::SCHEDULED);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).number(), 1);
  EXPECT_EQ(job.attempts(0).ranks_size(), 2);
  EXPECT_EQ(job.attempts(0).secret(), "") << "the rendezvous secret reached a client";

  int rank = 0;
  for (const std::string worker : {"a", "b"}) {
    std::vector<WorkerCommand> commands = Commands(worker);
    ASSERT_EQ(commands.size(), 1u) << worker;
    ASSERT_TRUE(commands[0].has_assign()) << worker;
    const trainyard::v1::Assignment& as = commands[0].assign();
    EXPECT_EQ(as.job_id(), id);
    EXPECT_EQ(as.attempt(), 1);
    EXPECT_EQ(as.world_size(), 2);
    EXPECT_EQ(as.secret().size(), 32u);
    EXPECT_FALSE(as.spec_json().empty());
    ASSERT_EQ(as.ranks_size(), 1) << worker;
    EXPECT_EQ(as.ranks(0).rank(), rank++);
    EXPECT_EQ(as.ranks(0).worker(), worker);
    EXPECT_EQ(as.ranks(0).host(), worker + ".host");
  }
  c().Tick();
  EXPECT_THAT(Commands("a"), IsEmpty()) << "assigned twice";
}

TEST_F(CoordinatorTest, AssignmentSecretOpensTheAttemptsRendezvous) {
  Register("a");
  Register("b");
  const std::string id = Submit();
  c().Tick();
  std::vector<WorkerCommand> commands = Commands("a");
  ASSERT_EQ(commands.size(), 1u);
  const std::string secret = commands[0].assign().secret();
  EXPECT_TRUE(c().rendezvous().Set({id, 1, secret}, "k", "v").ok());
  EXPECT_EQ(c().rendezvous().Set({id, 1, "guess"}, "k", "v").code(), StatusCode::kPermissionDenied);
}

TEST_F(CoordinatorTest, JobRunsOnceEveryRankReported) {
  const std::string id = StartJob(/*running=*/false);
  Heartbeat("a", {Rank(id, 1, 0)});
  EXPECT_EQ(State(id), trainyard::v1::SCHEDULED);
  Heartbeat("b", {Rank(id, 1, 1)});
  EXPECT_EQ(State(id), trainyard::v1::RUNNING);
}

TEST_F(CoordinatorTest, JobSucceedsWhenEveryRankExitsZero) {
  const std::string id = StartJob();
  Heartbeat("a", {Exited(id, 1, 0, 0)});
  EXPECT_EQ(State(id), trainyard::v1::RUNNING);
  Heartbeat("b", {Exited(id, 1, 1, 0)});
  const trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::SUCCEEDED);
  EXPECT_NE(job.attempts(0).ended_ms(), 0);
  EXPECT_EQ(job.restarts(), 0);
}

// Ranks of one worker that exit together: the one a signal killed (here rank 1, OOM-killed)
// is the attempt's reason, not rank 0 that lost its peer.
TEST_F(CoordinatorTest, ARankKilledBySignalIsTheReasonOverThePeersThatLostIt) {
  Register("a", /*cpu_slots=*/2);
  const std::string id = Submit();
  c().Tick();
  Heartbeat("a", {Rank(id, 1, 0), Rank(id, 1, 1)});
  ASSERT_EQ(State(id), trainyard::v1::RUNNING);
  RankStatus peer = Exited(id, 1, 0, 1);
  peer.set_error("all_reduce #12: rank 1 closed the connection or failed");
  RankStatus killed = Exited(id, 1, 1, 128 + 9);
  killed.set_error(
      "killed by SIGKILL, not by this worker: most likely the kernel's out-of-memory killer");
  Heartbeat("a", {peer, killed});
  const trainyard::v1::Job job = Get(id);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_THAT(job.attempts(0).end_reason(), HasSubstr("rank 1"));
  EXPECT_THAT(job.attempts(0).end_reason(), HasSubstr("out-of-memory"));
}

TEST_F(CoordinatorTest, FailedRankRestartsTheJobAfterTheOtherRankExited) {
  const std::string id = StartJob();
  RankStatus failed = Exited(id, 1, 0, 1);
  failed.set_error("boom");
  Heartbeat("a", {failed});

  trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_THAT(job.reason(), HasSubstr("rank 0 on a (a.host) exited with code 1: boom"));
  EXPECT_THAT(job.reason(), HasSubstr("restart 1 of 3"));
  std::vector<WorkerCommand> commands = Commands("b");
  ASSERT_EQ(commands.size(), 1u);
  ASSERT_TRUE(commands[0].has_abort());
  EXPECT_EQ(commands[0].abort().job_id(), id);
  EXPECT_EQ(commands[0].abort().attempt(), 1);
  EXPECT_THAT(Commands("a"), IsEmpty()) << "told the worker of the exited rank to stop it";

  // Rank 1 still holds its slot: no new attempt yet.
  c().Tick();
  EXPECT_EQ(State(id), trainyard::v1::RESTARTING);
  EXPECT_THAT(Commands("a"), IsEmpty());

  Heartbeat("b", {Exited(id, 1, 1, 137)});
  EXPECT_EQ(State(id), trainyard::v1::RESTARTING);
  c().Tick();
  job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::SCHEDULED);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(1).number(), 2);
  EXPECT_NE(job.attempts(0).ended_ms(), 0);
  for (const std::string worker : {"a", "b"}) {
    commands = Commands(worker);
    ASSERT_EQ(commands.size(), 1u) << worker;
    ASSERT_TRUE(commands[0].has_assign()) << worker;
    EXPECT_EQ(commands[0].assign().attempt(), 2);
  }
  // Reports of the old attempt no longer move the job.
  Heartbeat("a", {Exited(id, 1, 0, 1)});
  EXPECT_EQ(State(id), trainyard::v1::SCHEDULED);
  Heartbeat("a", {Rank(id, 2, 0)});
  Heartbeat("b", {Rank(id, 2, 1)});
  EXPECT_EQ(State(id), trainyard::v1::RUNNING);
}

TEST_F(CoordinatorTest, RankExitingWithCodeTwoFailsTheJobWithoutRestart) {
  const std::string id = StartJob();
  Heartbeat("a", {Exited(id, 1, 0, 2)});
  trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::FAILED);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_THAT(job.reason(), HasSubstr("exited with code 2"));
  std::vector<WorkerCommand> commands = Commands("b");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());

  Heartbeat("b", {Exited(id, 1, 1, 137)});
  c().Tick();
  EXPECT_EQ(State(id), trainyard::v1::FAILED);
  EXPECT_THAT(Commands("a"), IsEmpty()) << "a failed job was placed again";
}

TEST_F(CoordinatorTest, NoRestartsLeftFailsTheJob) {
  const std::string spec =
      R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
      R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":2},)"
      R"("fault_tolerance":{"max_restarts":0}})";
  const std::string id = StartJob(true, spec);
  Heartbeat("a", {Exited(id, 1, 0, 1)});
  const trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("no restarts left (fault_tolerance.max_restarts = 0)"));
}

TEST_F(CoordinatorTest, WorkerWithoutHeartbeatsForTheTimeoutRestartsTheJob) {
  const std::string id = StartJob();
  const auto timeout = c().options().heartbeat_timeout;
  // a keeps heartbeating; b goes silent.
  clock_.Advance(timeout / 2);
  Heartbeat("a", {Rank(id, 1, 0)});
  c().Tick();
  EXPECT_EQ(State(id), trainyard::v1::RUNNING) << "lost before the timeout";
  clock_.Advance(timeout / 2);
  Heartbeat("a", {Rank(id, 1, 0)});
  c().Tick();

  trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_THAT(job.reason(), HasSubstr("worker b (b.host) lost: no heartbeat for 10.0 s"));
  std::vector<WorkerCommand> commands = Commands("a");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());
  EXPECT_EQ(c().Incarnation("b").status().code(), StatusCode::kNotFound);

  // Once rank 0 exited, the job waits for capacity: a alone has too few slots.
  Heartbeat("a", {Exited(id, 1, 0, 137)});
  c().Tick();
  EXPECT_EQ(State(id), trainyard::v1::RESTARTING);
  EXPECT_THAT(Commands("a"), IsEmpty());
}

TEST_F(CoordinatorTest, LostWorkerMustRegisterAgain) {
  Register("a");
  clock_.Advance(c().options().heartbeat_timeout);
  c().Tick();
  trainyard::v1::WorkerHeartbeat hb;
  hb.set_name("a");
  EXPECT_EQ(c().Heartbeat(hb).code(), StatusCode::kNotFound);
  Register("a");
  EXPECT_TRUE(c().Heartbeat(hb).ok());
}

TEST_F(CoordinatorTest, TakeCommandsOfAnOlderIncarnationIsAborted) {
  Register("a");
  const int64_t first = *c().Incarnation("a");
  Register("a");
  EXPECT_GT(*c().Incarnation("a"), first);
  EXPECT_EQ(c().TakeCommands("a", first).status().code(), StatusCode::kAborted);
}

TEST_F(CoordinatorTest, HangNamesTheSilentRankAndRestartsTheJob) {
  const std::string id = StartJob(true, kHangSpec);
  // Rank 0 waits in collective #3 for the silent rank 1 (worker b stays alive: 6 s is under
  // the heartbeat timeout).
  for (int64_t waited_ms : {3000, 6000}) {
    clock_.Advance(3s);
    RankStatus waiting = Rank(id, 1, 0);
    waiting.set_phase("allreduce_wait");
    waiting.set_step(4);
    waiting.set_collectives_issued(3);
    waiting.set_collectives_done(2);
    waiting.set_collective_age_ms(waited_ms);
    Heartbeat("a", {waiting});
    c().Tick();
    if (waited_ms < 5000) {
      EXPECT_EQ(State(id), trainyard::v1::RUNNING) << "hung too early";
    }
  }

  const trainyard::v1::Job job = Get(id);
  ASSERT_EQ(job.diagnoses_size(), 1);
  const trainyard::v1::Diagnosis& d = job.diagnoses(0);
  EXPECT_EQ(d.kind(), trainyard::v1::Diagnosis::HANG);
  EXPECT_EQ(d.rank(), 1);
  EXPECT_EQ(d.worker(), "b");
  EXPECT_EQ(d.attempt(), 1);
  EXPECT_EQ(d.collective_seq(), 3);
  EXPECT_THAT(d.message(), HasSubstr("rank 1 on b (b.host) is hung: no report for 6.0 s"));
  EXPECT_THAT(d.message(), HasSubstr("while rank 0 waits in collective #3"));
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 on b (b.host) is hung"));
  std::vector<WorkerCommand> commands = Commands("b");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());
}

// One step of `rank` as its worker reports it: the phases split the step's wall time, so
// allreduce_wait_seconds is not part of backward_seconds.
trainyard::v1::MetricsReport Step(const std::string& job_id, int rank, int64_t step,
                                  double compute_seconds, double wait_seconds) {
  trainyard::v1::MetricsReport r;
  r.set_job_id(job_id);
  r.set_attempt(1);
  r.set_worker(rank == 0 ? "a" : "b");  // where StartJob placed the rank
  trainyard::v1::StepMetrics* m = r.mutable_step();
  m->set_rank(rank);
  m->set_step(step);
  m->set_total_steps(10);
  m->set_data_seconds(0.1 * compute_seconds);
  m->set_forward_seconds(0.4 * compute_seconds);
  m->set_backward_seconds(0.4 * compute_seconds);
  m->set_allreduce_wait_seconds(wait_seconds);
  m->set_optimizer_seconds(0.1 * compute_seconds);
  return r;
}

class StragglerTest : public CoordinatorTest {
 protected:
  // A running job of two ranks (straggler window 3 steps) whose rank 1 computes for 0.3 s a
  // step while rank 0 computes for 0.1 s and then waits 0.2 s for rank 1's gradients, for
  // steps 1 to 3; then a tick.
  std::string StartJobWithASlowRank() {
    const std::string spec =
        R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
        R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":2},)"
        R"("fault_tolerance":{"straggler_window_steps":3}})";
    const std::string id = StartJob(true, spec);
    for (int64_t step = 1; step <= 3; ++step) {
      EXPECT_TRUE(c().ReportMetrics(Step(id, 0, step, 0.1, 0.2)).ok());
      EXPECT_TRUE(c().ReportMetrics(Step(id, 1, step, 0.3, 0.0)).ok());
    }
    c().Tick();
    return id;
  }
};

TEST_F(StragglerTest, AWorkerCannotReportForAnotherWorkersRank) {
  const std::string id = StartJobWithASlowRank();
  trainyard::v1::MetricsReport forged = Step(id, 1, 4, 0.1, 0.0);
  forged.set_worker("a");  // rank 1 runs on b
  Status s = c().ReportMetrics(forged);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("rank 1 of job " + id + " runs on worker b, not on a"));
  EXPECT_EQ(Get(id).last_step().step(), 3);
}

TEST_F(StragglerTest, RankComputingThreeTimesLongerIsFlaggedAsAStraggler) {
  const std::string id = StartJobWithASlowRank();
  trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RUNNING);
  EXPECT_THAT(job.stragglers(), ElementsAre(1));
  ASSERT_EQ(job.diagnoses_size(), 1);
  EXPECT_EQ(job.diagnoses(0).kind(), trainyard::v1::Diagnosis::STRAGGLER);
  EXPECT_EQ(job.diagnoses(0).rank(), 1);
  EXPECT_THAT(job.diagnoses(0).message(), HasSubstr("rank 1 on b (b.host) is a straggler"));
  EXPECT_THAT(job.diagnoses(0).message(), HasSubstr("3.0x the other ranks' median of 0.1 s"));

  // Rank 1 catches up.
  for (int64_t step = 4; step <= 6; ++step) {
    ASSERT_TRUE(c().ReportMetrics(Step(id, 0, step, 0.1, 0.0)).ok());
    ASSERT_TRUE(c().ReportMetrics(Step(id, 1, step, 0.1, 0.0)).ok());
  }
  c().Tick();
  job = Get(id);
  EXPECT_THAT(job.stragglers(), IsEmpty());
  ASSERT_EQ(job.diagnoses_size(), 2);
  EXPECT_EQ(job.diagnoses(1).kind(), trainyard::v1::Diagnosis::STRAGGLER_CLEARED);
  EXPECT_EQ(job.last_step().step(), 6);
}

// The straggler gauge (alerted on) counts flagged ranks of a running job only: a job that ended
// with a rank flagged has none.
TEST_F(StragglerTest, AJobThatEndedHasNoStragglersInTheSnapshot) {
  const std::string id = StartJobWithASlowRank();
  auto stragglers = [&] {
    for (const auto& g : c().GetSnapshot().jobs)
      if (g.id == id) return g.stragglers;
    return -1;
  };
  EXPECT_EQ(stragglers(), 1);
  // Both finish the run's 10 steps (an exit 0 before the last step is a failure).
  for (const auto& [worker, rank] : {std::pair<std::string, int>{"a", 0}, {"b", 1}}) {
    RankStatus done = Exited(id, 1, rank, 0);
    done.set_step(10);
    Heartbeat(worker, {done});
  }
  ASSERT_EQ(State(id), trainyard::v1::SUCCEEDED);
  EXPECT_EQ(stragglers(), 0);
}

TEST_F(CoordinatorTest, CancelOfAPendingJobCancelsItAtOnce) {
  Register("a", 2);
  const std::string id = Submit();
  StatusOr<trainyard::v1::Job> job = c().Cancel(id, /*checkpoint=*/false);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), trainyard::v1::CANCELLED);
  EXPECT_TRUE(job->cancel_requested());
  EXPECT_EQ(State(id), trainyard::v1::CANCELLED);

  c().Tick();
  EXPECT_THAT(Commands("a"), IsEmpty()) << "a cancelled job was placed";
  EXPECT_EQ(c().Cancel(id, false).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c().Cancel("t-99", false).status().code(), StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, CancelOfARunningJobEndsOnceItsRanksExited) {
  const std::string id = StartJob();
  ASSERT_TRUE(c().Cancel(id, /*checkpoint=*/true).ok());
  for (const std::string worker : {"a", "b"}) {
    std::vector<WorkerCommand> commands = Commands(worker);
    ASSERT_EQ(commands.size(), 1u) << worker;
    ASSERT_TRUE(commands[0].has_cancel()) << worker;
    EXPECT_TRUE(commands[0].cancel().checkpoint());
  }
  // SIGTERM: the ranks save a checkpoint and exit 128 + 15.
  Heartbeat("a", {Exited(id, 1, 0, 143)});
  Heartbeat("b", {Exited(id, 1, 1, 143)});
  c().Tick();
  const trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::CANCELLED);
  EXPECT_EQ(job.restarts(), 0);
}

TEST_F(CoordinatorTest, ACancelIsSentAgainWhileItsRanksStillRun) {
  const std::string id = StartJob();
  ASSERT_TRUE(c().Cancel(id, /*checkpoint=*/true).ok());
  Commands("a");  // taken, as by a stream that then broke
  Heartbeat("a", {Rank(id, 1, 0)});
  std::vector<WorkerCommand> again = Commands("a");
  ASSERT_EQ(again.size(), 1u);
  ASSERT_TRUE(again[0].has_cancel());
  EXPECT_TRUE(again[0].cancel().checkpoint());
  EXPECT_EQ(State(id), trainyard::v1::RUNNING);
}

TEST_F(CoordinatorTest, RestartedCoordinatorKeepsTheJobsAndTheirStates) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  Start(*std::move(store));

  const std::string done = StartJob();
  Heartbeat("a", {Exited(done, 1, 0, 0)});
  Heartbeat("b", {Exited(done, 1, 1, 0)});
  ASSERT_EQ(State(done), trainyard::v1::SUCCEEDED);
  const std::string pending = Submit();
  const std::string cancelled = Submit();
  ASSERT_TRUE(c().Cancel(cancelled, false).ok());

  coordinator_.reset();  // closes its store
  store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  Start(*std::move(store));

  EXPECT_EQ(State(done), trainyard::v1::SUCCEEDED);
  EXPECT_EQ(Get(done).attempts_size(), 1);
  EXPECT_EQ(State(pending), trainyard::v1::PENDING);
  EXPECT_EQ(State(cancelled), trainyard::v1::CANCELLED);
  StatusOr<trainyard::v1::ListJobsResponse> list = c().ListJobs({});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs_size(), 3);
  EXPECT_EQ(list->jobs(0).id(), cancelled);  // newest first

  // Job numbers carry on, and the pending job runs once workers come back.
  Register("a");
  Register("b");
  EXPECT_EQ(Submit(), "t-4");
  c().Tick();
  EXPECT_EQ(State(pending), trainyard::v1::SCHEDULED);
  ASSERT_EQ(Commands("a").size(), 1u);
}

// A RegisterWorkerRequest of `name` (one CPU slot) still supervising `ranks`.
trainyard::v1::RegisterWorkerRequest Reregistration(const std::string& name,
                                                    const std::vector<RankStatus>& ranks) {
  trainyard::v1::RegisterWorkerRequest req;
  req.set_name(name);
  req.set_host(name + ".host");
  req.set_cpu_slots(1);
  for (const RankStatus& s : ranks) *req.add_ranks() = s;
  return req;
}

TEST_F(CoordinatorTest, RestartedCoordinatorKeepsARunningJobWhoseWorkersComeBackWithItsRanks) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  Start(*std::move(store));
  Register("a");
  Register("b");
  const std::string id = Submit();
  c().Tick();
  std::vector<WorkerCommand> commands = Commands("a");
  ASSERT_EQ(commands.size(), 1u);
  const std::string secret = commands[0].assign().secret();
  Heartbeat("a", {Rank(id, 1, 0)});
  Heartbeat("b", {Rank(id, 1, 1)});
  ASSERT_EQ(State(id), trainyard::v1::RUNNING);

  coordinator_.reset();
  store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  Start(*std::move(store));
  EXPECT_EQ(State(id), trainyard::v1::RUNNING);
  // The ranks still rendezvous with the attempt's secret.
  EXPECT_TRUE(c().rendezvous().Set({id, 1, secret}, "k", "v").ok());

  ASSERT_TRUE(c().RegisterWorker(Reregistration("a", {Rank(id, 1, 0)})).ok());
  ASSERT_TRUE(c().RegisterWorker(Reregistration("b", {Rank(id, 1, 1)})).ok());
  clock_.Advance(c().options().heartbeat_timeout / 2);
  Heartbeat("a", {Rank(id, 1, 0)});
  Heartbeat("b", {Rank(id, 1, 1)});
  c().Tick();
  EXPECT_EQ(State(id), trainyard::v1::RUNNING);
  EXPECT_THAT(Commands("a"), IsEmpty());
  EXPECT_THAT(Commands("b"), IsEmpty());

  Heartbeat("a", {Exited(id, 1, 0, 0)});
  Heartbeat("b", {Exited(id, 1, 1, 0)});
  EXPECT_EQ(State(id), trainyard::v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, RestartedCoordinatorFinishesACancelThatWasUnderWay) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  Start(*std::move(store));
  const std::string id = StartJob();
  ASSERT_TRUE(c().Cancel(id, /*checkpoint=*/true).ok());
  for (const std::string worker : {"a", "b"}) {
    std::vector<WorkerCommand> commands = Commands(worker);
    ASSERT_EQ(commands.size(), 1u) << worker;
    ASSERT_TRUE(commands[0].has_cancel()) << worker;
  }

  coordinator_.reset();
  store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  Start(*std::move(store));
  // The ranks saved their checkpoint and exited while the coordinator was away.
  ASSERT_TRUE(c().RegisterWorker(Reregistration("a", {Exited(id, 1, 0, 143)})).ok());
  ASSERT_TRUE(c().RegisterWorker(Reregistration("b", {Exited(id, 1, 1, 143)})).ok());
  c().Tick();
  const trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::CANCELLED);
  EXPECT_EQ(job.restarts(), 0);
}

TEST_F(CoordinatorTest, WorkerComingBackWithoutItsRankRestartsTheJob) {
  const std::string id = StartJob();
  // b's daemon restarted: it supervises nothing now.
  ASSERT_TRUE(c().RegisterWorker(Reregistration("b", {})).ok());
  const trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_THAT(job.reason(), HasSubstr("worker b (b.host) came back without rank 1 on b"));
  std::vector<WorkerCommand> commands = Commands("a");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());

  Heartbeat("a", {Exited(id, 1, 0, 137)});
  c().Tick();
  EXPECT_EQ(State(id), trainyard::v1::SCHEDULED);
  EXPECT_EQ(Get(id).attempts_size(), 2);
}

TEST_F(CoordinatorTest, RankOfAnAttemptThatIsOverIsToldToStop) {
  Register("a");
  Heartbeat("a", {Rank("t-7", 3, 0)});
  std::vector<WorkerCommand> commands = Commands("a");
  ASSERT_EQ(commands.size(), 1u);
  ASSERT_TRUE(commands[0].has_abort());
  EXPECT_EQ(commands[0].abort().job_id(), "t-7");
  EXPECT_EQ(commands[0].abort().attempt(), 3);
  Heartbeat("a", {Exited("t-7", 3, 0, 137)});
  EXPECT_THAT(Commands("a"), IsEmpty()) << "told an exited rank to stop";
}

TEST_F(CoordinatorTest, ScheduledAttemptWhoseRanksDoNotStartInTimeIsRestarted) {
  const std::string id = StartJob(/*running=*/false);
  Heartbeat("a", {Rank(id, 1, 0)});
  // Keep both workers alive while rank 1 never starts.
  const auto step = c().options().heartbeat_timeout / 2;
  for (auto waited = step; waited < c().options().start_timeout; waited += step) {
    clock_.Advance(step);
    Heartbeat("a", {Rank(id, 1, 0)});
    Heartbeat("b", {});
    c().Tick();
    ASSERT_EQ(State(id), trainyard::v1::SCHEDULED) << "aborted after " << waited.count() << " ms";
  }
  clock_.Advance(step);
  c().Tick();
  const trainyard::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), trainyard::v1::RESTARTING);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 on b (b.host) did not start within 120.0 s"));
}

TEST_F(CoordinatorTest, WatchDeliversTheCurrentStateFirstThenLaterTransitions) {
  Register("a");
  Register("b");
  const std::string id = Submit();
  StatusOr<std::shared_ptr<Watcher>> watcher = c().Watch(id);
  ASSERT_TRUE(watcher.ok()) << watcher.status();

  JobEvent e;
  ASSERT_TRUE((*watcher)->Next(&e, kWait));
  ASSERT_TRUE(e.has_state());
  EXPECT_EQ(e.state().from(), trainyard::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(e.state().to(), trainyard::v1::PENDING);
  EXPECT_FALSE((*watcher)->Next(&e, 0ms)) << "an event before anything happened";

  c().Tick();
  ASSERT_TRUE((*watcher)->Next(&e, kWait));
  EXPECT_EQ(e.state().from(), trainyard::v1::PENDING);
  EXPECT_EQ(e.state().to(), trainyard::v1::SCHEDULED);
  EXPECT_EQ(e.state().attempt(), 1);

  Heartbeat("a", {Rank(id, 1, 0)});
  Heartbeat("b", {Rank(id, 1, 1)});
  Heartbeat("a", {Exited(id, 1, 0, 0)});
  Heartbeat("b", {Exited(id, 1, 1, 0)});
  std::vector<trainyard::v1::JobState> later;
  while ((*watcher)->Next(&e, kWait)) later.push_back(e.state().to());
  EXPECT_THAT(later, ElementsAre(trainyard::v1::RUNNING, trainyard::v1::SUCCEEDED));
  EXPECT_TRUE((*watcher)->ended());

  // A watch of a finished job gives its state and ends.
  watcher = c().Watch(id);
  ASSERT_TRUE(watcher.ok());
  ASSERT_TRUE((*watcher)->Next(&e, kWait));
  EXPECT_EQ(e.state().to(), trainyard::v1::SUCCEEDED);
  EXPECT_FALSE((*watcher)->Next(&e, kWait));
  EXPECT_TRUE((*watcher)->ended());
}

}  // namespace
}  // namespace trainyard::server
