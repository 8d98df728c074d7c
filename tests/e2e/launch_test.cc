// End-to-end: `trainyard train SPEC --nproc N`, the local launcher (client/launch.h), run as a
// user runs it: bad --nproc values, a rank's environment, real two-rank training over Gloo on
// loopback, a rank killed mid-run, and Ctrl-C reaching every rank.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "common/json.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "worker/dist/store.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ProcessResult;
using testing::RunProcess;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;

const std::string kBin = TY_TRAINYARD_BIN;

ProcessResult Train(std::vector<std::string> args, std::chrono::milliseconds timeout = 300s) {
  args.insert(args.begin(), {kBin, "train"});
  return RunProcess(args, timeout);
}

// A tiny MLP on the first 2 000 Fashion-MNIST images; `extra` is appended as YAML.
std::string WriteFashionSpec(const TempDir& dir, int64_t steps, const std::string& extra = "") {
  const std::string spec = dir.File("spec.yaml");
  std::ofstream(spec) << "name: launch-test\n"
                      << "model: {mlp: {sizes: [784, 32, 10]}}\n"
                      << "data: {fashion_mnist: {limit: 2000}, num_workers: 0}\n"
                      << "optimizer: {sgd: {lr: 0.1, momentum: 0.9}}\n"
                      << "batch_size: 32\nsteps: " << steps << "\nseed: 1\n"
                      << "eval: {max_batches: 10}\n"
                      << "checkpoint: {dir: " << dir.File("ckpt") << "}\n"
                      << extra;
  return spec;
}

TEST(LaunchTest, BadNprocValuesExitWithTwoAndSayWhy) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 10);
  for (const char* bad : {"0", "-1", "abc", "", "2x", "5000"}) {
    ProcessResult r = Train({spec, "--nproc", bad});
    EXPECT_EQ(r.exit_code, 2) << "--nproc " << bad << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(std::string("--nproc \"") + bad +
                                 "\": must be a number of processes in "
                                 "[1, 4096]"));
  }
  ProcessResult r = Train({spec, "--nproc=0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nproc \"0\": must be"));
  r = Train({spec, "--nproc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nproc takes a number"));
}

// --nproc is the spec's world_size before the rules that relate it to other fields run: 2
// pipeline stages divide it (the MLP is then the only problem).
TEST(LaunchTest, NprocSetsTheWorldSizeThatTheSpecsRulesSee) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 10);
  ProcessResult r = Train({spec, "--nproc", "2", "--set", "parallelism.pipeline_stages=2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("parallelism.pipeline_stages = 2: needs model.gpt (model is mlp)"));
  EXPECT_THAT(r.err, Not(HasSubstr("must divide parallelism.world_size")));
  EXPECT_THAT(r.err, HasSubstr("(1 problem)"));
}

TEST(LaunchTest, NprocAndWorldSizeMustAgreeWhenBothAreGiven) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 10, "parallelism: {world_size: 3}\n");
  ProcessResult r = Train({spec, "--nproc", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nproc 2 and parallelism.world_size = 3 in " + spec + " differ"));

  // An override counts as the spec; the camelCase name too.
  r = Train({WriteFashionSpec(dir, 10), "--set", "parallelism.worldSize=4", "--nproc", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nproc 1 and parallelism.world_size = 4"));

  r = Train({WriteFashionSpec(dir, 10, "parallelism: {world_size: 4, ranks_per_node: 2}\n")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("parallelism.ranks_per_node = 2: a local launch starts all 4 "
                               "ranks on this node; set it to 0 or 4"));
}

TEST(LaunchTest, ARankChecksTheLaunchersEnvironment) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 10);
  auto run_with = [&](std::vector<std::pair<const char*, const char*>> env) {
    for (const auto& [name, value] : env) ::setenv(name, value, 1);
    ProcessResult r = Train({spec}, 60s);
    for (const auto& [name, value] : env) ::unsetenv(name);
    return r;
  };
  ProcessResult r = run_with({{"TRAINYARD_RANK", "0"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TRAINYARD_WORLD_SIZE is not set: a rank needs TRAINYARD_RANK"));

  r = run_with({{"TRAINYARD_RANK", "2"}, {"TRAINYARD_WORLD_SIZE", "2"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TRAINYARD_RANK = \"2\": must be an integer in [0, 1] "
                               "(TRAINYARD_WORLD_SIZE = 2)"));

  r = run_with({{"TRAINYARD_RANK", "0"},
                {"TRAINYARD_WORLD_SIZE", "2"},
                {"TRAINYARD_STORE", "nohost"},
                {"TRAINYARD_RUN_ID", "x"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TRAINYARD_STORE = \"nohost\": must be host:port"));

  r = run_with({{"TRAINYARD_RANK", "0"},
                {"TRAINYARD_WORLD_SIZE", "2"},
                {"TRAINYARD_STORE", "127.0.0.1:1"},
                {"TRAINYARD_RUN_ID", "a/b"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TRAINYARD_RUN_ID = \"a/b\": must be 1 to 64 characters"));
}

// --- Real multi-process runs -----------------------------------------------------------------

TEST(LaunchTest, TwoRanksTrainAndOnlyRankZeroPrintsTheSummary) {
  TempDir dir;
  ProcessResult r = Train({WriteFashionSpec(dir, 20), "--nproc", "2", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  StatusOr<Json> s = Json::Parse(r.out);  // one JSON object: rank 1's stdout is discarded
  ASSERT_TRUE(s.ok()) << s.status() << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_EQ(*s->Find("name"), Json("launch-test"));
  EXPECT_EQ(*s->Find("steps"), Json(20));
  EXPECT_EQ(*s->Find("interrupted"), Json(false));
  EXPECT_THAT(r.err, HasSubstr("trainyard: launching 2 ranks"));
  EXPECT_THAT(r.err, HasSubstr("steps of 32 x 2 ranks"));
  EXPECT_THAT(r.err, HasSubstr("step 20/20"));
  EXPECT_THAT(r.err, Not(HasSubstr("[rank 1] step")));  // rank 1 runs --quiet
}

// The pid of rank `rank` of a run of `spec` (a file in a fresh temporary directory), found
// through /proc: its command line names the spec and its environment the rank. -1 when none.
pid_t FindRank(const std::string& spec, int rank) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return -1;
  pid_t found = -1;
  while (dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string dir = "/proc/" + std::to_string(pid);
    bool names_spec = false, is_rank = false;
    std::ifstream cmdline(dir + "/cmdline");
    for (std::string arg; std::getline(cmdline, arg, '\0');) names_spec |= arg == spec;
    std::ifstream environ(dir + "/environ");
    for (std::string var; std::getline(environ, var, '\0');) {
      is_rank |= var == "TRAINYARD_RANK=" + std::to_string(rank);
    }
    if (names_spec && is_rank) found = pid;
  }
  ::closedir(proc);
  return found;
}

// A rank killed mid-training: the surviving rank's collective fails within the 5 s timeout,
// naming the collective, and it exits on its own; the launcher names the killed rank.
TEST(LaunchTest, AKilledRankFailsTheRunNamingItWithinTheTimeout) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 100000000);
  Subprocess p(
      {kBin, "train", spec, "--nproc", "2", "--set", "parallelism.collective_timeout_seconds=5"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.WaitForStderr("step 1/", 120s)) << "no progress line";
  const pid_t rank1 = FindRank(spec, 1);
  ASSERT_GT(rank1, 0) << "rank 1 not found in /proc";
  ::kill(rank1, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ProcessResult r = p.Wait(60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("trainyard: rank 1 was killed by SIGKILL"));
  EXPECT_THAT(r.err, ::testing::ContainsRegex("all_reduce #[0-9]+"));  // rank 0's own error
  EXPECT_THAT(r.err, Not(HasSubstr("killing rank 0")));                // it exited by itself
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s + 2s);
  EXPECT_EQ(FindRank(spec, 0), -1) << "rank 0 outlived the launcher";
}

// Rank 0 of 2 started by hand against a real store, with no rank 1: it fails within the 5 s
// collective timeout, naming the rank that never joined.
TEST(LaunchTest, ARankWhosePeerNeverJoinsFailsWithinTheTimeout) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 10);
  StatusOr<std::unique_ptr<dist::TcpStoreServer>> store = dist::TcpStoreServer::Start();
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string address = (*store)->address();
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, std::string>>{{"TRAINYARD_RANK", "0"},
                                                        {"TRAINYARD_WORLD_SIZE", "2"},
                                                        {"TRAINYARD_STORE", address},
                                                        {"TRAINYARD_RUN_ID", "alone"}}) {
    ::setenv(name, value.c_str(), 1);
  }
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = Train({spec, "--set", "parallelism.collective_timeout_seconds=5"}, 60s);
  for (const char* name :
       {"TRAINYARD_RANK", "TRAINYARD_WORLD_SIZE", "TRAINYARD_STORE", "TRAINYARD_RUN_ID"}) {
    ::unsetenv(name);
  }
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("rank 1"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s + 3s);
  EXPECT_GT(std::chrono::steady_clock::now() - start, 4s);  // it did wait for the peer
}

// 2000 samples on 3 ranks: shards of 667 (one padded sample), so a checkpoint at the end of
// the epoch counts 2001 samples consumed; one process (the same global batch: the same run)
// resumes it in the next epoch.
TEST(LaunchTest, ACheckpointAtAnEpochsEndResumesOnAnotherWorldSize) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 1);
  ProcessResult r = Train({spec, "--nproc", "3", "--set", "batch_size=667", "--quiet"}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Train({spec, "--set", "steps=2", "--set", "batch_size=2001", "-o", "json", "--quiet"}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  StatusOr<Json> s = Json::Parse(r.out);
  ASSERT_TRUE(s.ok()) << s.status() << "\nstdout: " << r.out;
  EXPECT_EQ(*s->Find("resumed_from"), Json(dir.File("ckpt") + "/step-00000001"));
  EXPECT_EQ(*s->Find("steps_this_run"), Json(1));
}

TEST(LaunchTest, SigintStopsEveryRankWithACheckpoint) {
  TempDir dir;
  const std::string spec = WriteFashionSpec(dir, 100000000);
  Subprocess p({kBin, "train", spec, "--nproc", "2", "-o", "json"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.WaitForStderr("step 1/", 120s)) << "no progress line";
  p.Signal(SIGINT);
  ProcessResult r = p.Wait(120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("exited with code")));  // 143 is how a stopped rank exits
  StatusOr<Json> s = Json::Parse(r.out);
  ASSERT_TRUE(s.ok()) << s.status() << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_EQ(*s->Find("interrupted"), Json(true));
  EXPECT_THAT(s->Find("checkpoint")->string_value(), HasSubstr(dir.File("ckpt") + "/step-"));
}

}  // namespace
}  // namespace trainyard
