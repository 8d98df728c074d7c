// RankSupervisor with a stand-in rank program (a shell script run as `script rank`): reports
// read from the pipe, the stderr tail of a failed rank, exit codes, and stopping by SIGTERM
// then SIGKILL after the grace period. Bounded waits only.
#include "worker/daemon/rank_supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <map>

#include "tests/testing/temp_dir.h"

namespace trainyard::daemon {
namespace {

using namespace std::chrono_literals;

std::string Script(const testing::TempDir& dir, const std::string& body) {
  const std::string path = dir.File("rank.sh");
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

trainyard::v1::Assignment Assign(int ranks) {
  trainyard::v1::Assignment a;
  a.set_job_id("job-1");
  a.set_attempt(1);
  a.set_secret("s");
  a.set_spec_json("{}");
  a.set_world_size(ranks);
  for (int r = 0; r < ranks; ++r) {
    auto* p = a.add_ranks();
    p->set_rank(r);
    p->set_slot(r);
  }
  return a;
}

// Polls until every rank has exited (at most `timeout`).
bool PollUntilExited(RankSupervisor& s, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (s.running() > 0 && std::chrono::steady_clock::now() < deadline) s.Poll(50ms);
  return s.running() == 0;
}

TEST(RankSupervisorTest, ForwardsReportsAndReportsTheExitAfterThem) {
  testing::TempDir dir;
  SupervisorOptions o;
  o.program = Script(dir,
                     "echo '{\"type\":\"status\",\"step\":3,\"phase\":\"backward\",\"issued\":7,"
                     "\"done\":6,\"phase_age_ms\":10,\"collective_age_ms\":20}' >&3\n"
                     "echo '{\"type\":\"step\",\"step\":4,\"loss\":1.5}' >&3\n"
                     "echo \"rank $TRAINYARD_RANK of $TRAINYARD_WORLD_SIZE\" >&2\nexit 0");
  o.work_dir = dir.File("work");
  std::vector<std::pair<int, Json>> reports;
  o.on_report = [&](const trainyard::v1::RankStatus& who, const Json& line) {
    reports.emplace_back(who.rank(), line);
  };
  RankSupervisor s(o);
  ASSERT_TRUE(s.Start(Assign(2)).ok());
  EXPECT_EQ(s.running(), 2);
  ASSERT_TRUE(PollUntilExited(s, 10s));
  ASSERT_EQ(reports.size(), 2u);  // the step lines; status lines are kept, not forwarded
  EXPECT_EQ(reports[0].second.Find("type")->string_value(), "step");
  std::vector<trainyard::v1::RankStatus> statuses = s.Statuses();
  ASSERT_EQ(statuses.size(), 2u);
  for (const auto& st : statuses) {
    EXPECT_TRUE(st.exited());
    EXPECT_EQ(st.exit_code(), 0);
    EXPECT_EQ(st.step(), 4);
    EXPECT_EQ(st.collectives_issued(), 7);
    EXPECT_EQ(st.collectives_done(), 6);
    EXPECT_EQ(st.phase(), "backward");
  }
  EXPECT_TRUE(std::ifstream(dir.File("work/job-1/attempt-1/spec.json")).good());
}

// The status of one rank running the shell script `body` to its end (at most 10 s).
trainyard::v1::RankStatus RunToExit(const std::string& body) {
  testing::TempDir dir;
  SupervisorOptions o;
  o.program = Script(dir, body);
  o.work_dir = dir.File("work");
  RankSupervisor s(o);
  EXPECT_TRUE(s.Start(Assign(1)).ok());
  EXPECT_TRUE(PollUntilExited(s, 10s));
  const std::vector<trainyard::v1::RankStatus> statuses = s.Statuses();
  return statuses.empty() ? trainyard::v1::RankStatus() : statuses[0];
}

TEST(RankSupervisorTest, AFailedRankCarriesTheTailOfItsStderr) {
  const auto st =
      RunToExit("echo 'loading data' >&2\necho 'error: data.csv.path: cannot open' >&2\nexit 2");
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(st.error(), "loading data | error: data.csv.path: cannot open");
}

// A SIGKILL the worker did not send (the kernel's OOM killer, here the rank itself) is said to
// be most likely that; one the worker sent (Abort, below) is not.
TEST(RankSupervisorTest, ARankKilledFromOutsideIsSaidToBeLikelyOutOfMemory) {
  const auto st = RunToExit("echo 'step 3' >&2\nkill -9 $$");
  EXPECT_EQ(st.exit_code(), 128 + SIGKILL);
  EXPECT_EQ(st.error().rfind("killed by SIGKILL, not by this worker: most likely the kernel's "
                             "out-of-memory killer",
                             0),
            0u)
      << st.error();
  EXPECT_NE(st.error().find("| step 3"), std::string::npos) << st.error();
}

TEST(RankSupervisorTest, RanksInheritWhereTheLibrariesAreButNoOtherTrainyardSetting) {
  testing::TempDir dir;
  ::setenv("TRAINYARD_CUDA_LIB", "/opt/ty/libtrainyard_cuda.so", 1);
  ::setenv("TRAINYARD_NCCL_LIB", "/opt/ty/libtrainyard_nccl.so", 1);
  ::setenv("TRAINYARD_TOKEN", "daemon-secret", 1);
  SupervisorOptions o;
  o.program = Script(dir,
                     "echo \"$TRAINYARD_CUDA_LIB $TRAINYARD_NCCL_LIB [$TRAINYARD_TOKEN]\" >&2\n"
                     "exit 1");
  o.work_dir = dir.File("work");
  RankSupervisor s(o);
  ASSERT_TRUE(s.Start(Assign(1)).ok());
  ASSERT_TRUE(PollUntilExited(s, 10s));
  ::unsetenv("TRAINYARD_CUDA_LIB");
  ::unsetenv("TRAINYARD_NCCL_LIB");
  ::unsetenv("TRAINYARD_TOKEN");
  EXPECT_EQ(s.Statuses().at(0).error(),
            "/opt/ty/libtrainyard_cuda.so /opt/ty/libtrainyard_nccl.so []");
}

TEST(RankSupervisorTest, StopSendsSigtermThenSigkillAfterTheGrace) {
  testing::TempDir dir;
  SupervisorOptions o;
  // Ignores SIGTERM: only the SIGKILL after the grace period ends it.
  o.program = Script(dir, "trap '' TERM\nwhile true; do sleep 0.05; done");
  o.work_dir = dir.File("work");
  o.grace = 300ms;
  RankSupervisor s(o);
  ASSERT_TRUE(s.Start(Assign(1)).ok());
  s.Poll(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  s.Stop("job-1", 1, /*checkpoint=*/true);
  ASSERT_TRUE(PollUntilExited(s, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
  EXPECT_EQ(s.Statuses().at(0).exit_code(), 128 + SIGKILL);
}

TEST(RankSupervisorTest, AbortKillsAtOnceAndARepeatedAssignmentStartsNothing) {
  testing::TempDir dir;
  SupervisorOptions o;
  o.program = Script(dir, "while true; do sleep 0.05; done");
  o.work_dir = dir.File("work");
  o.grace = 60s;
  RankSupervisor s(o);
  ASSERT_TRUE(s.Start(Assign(2)).ok());
  ASSERT_TRUE(s.Start(Assign(2)).ok());
  EXPECT_EQ(s.running(), 2);
  s.Stop("job-1", 0, /*checkpoint=*/false);
  ASSERT_TRUE(PollUntilExited(s, 5s));  // far below the grace: SIGKILL at once
  for (const auto& st : s.Statuses()) {
    EXPECT_EQ(st.exit_code(), 128 + SIGKILL);
    EXPECT_EQ(st.error().find("out-of-memory"), std::string::npos) << st.error();
  }
}

// An elastic job's regroup: listed ranks are rekeyed and read their line from the command
// pipe; the one not listed is killed. A rank's `regrouping` is its current attempt's only.
TEST(RankSupervisorTest, RegroupRekeysTheListedRanksTellsThemAndKillsTheOthers) {
  testing::TempDir dir;
  SupervisorOptions o;
  o.program = Script(dir,
                     "echo '{\"type\":\"status\",\"step\":1,\"regrouping\":true,"
                     "\"group_error\":\"reset\",\"attempt\":1}' >&3\n"
                     "read line <&$TRAINYARD_COMMAND_FD\necho \"$line\" >&2\nexit 3");
  o.work_dir = dir.File("work");
  RankSupervisor s(o);
  ASSERT_TRUE(s.Start(Assign(3)).ok());
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  auto regrouping = [&] {
    int n = 0;
    for (const auto& st : s.Statuses()) n += st.regrouping() && st.group_error() == "reset";
    return n;
  };
  while (regrouping() < 3 && std::chrono::steady_clock::now() < deadline) s.Poll(50ms);
  ASSERT_EQ(regrouping(), 3);

  trainyard::v1::Regroup g;
  g.set_job_id("job-1");
  g.set_from_attempt(1);
  g.set_attempt(2);
  g.set_secret("s2");
  g.set_world_size(2);
  for (auto [from, to] : {std::pair{2, 0}, std::pair{0, 1}}) {
    auto* remap = g.add_ranks();
    remap->set_from_rank(from);
    remap->set_rank(to);
  }
  s.Regroup(g);
  s.Regroup(g);  // a repeat changes nothing
  ASSERT_TRUE(PollUntilExited(s, 10s));
  std::map<std::pair<int, int>, trainyard::v1::RankStatus> by_key;
  for (const auto& st : s.Statuses()) by_key[{st.attempt(), st.rank()}] = st;
  ASSERT_EQ(by_key.size(), 3u);
  EXPECT_EQ(by_key[std::pair(1, 1)].exit_code(), 128 + SIGKILL) << "not listed";
  for (int rank : {0, 1}) {
    const trainyard::v1::RankStatus& st = by_key[std::pair(2, rank)];
    EXPECT_EQ(st.exit_code(), 3) << rank;
    EXPECT_FALSE(st.regrouping()) << "it left attempt 1's group, not attempt 2's";
    EXPECT_EQ(st.error(), R"({"type":"regroup","attempt":2,"secret":"s2","rank":)" +
                              std::to_string(rank) +
                              R"(,"world_size":2,"at_step_boundary":false})");
  }
}

}  // namespace
}  // namespace trainyard::daemon
