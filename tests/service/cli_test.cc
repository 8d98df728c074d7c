// The trainyard CLI against a real coordinator: submit --watch, list, describe, watch's exit
// codes, cancel with a checkpoint, and Ctrl-C of `trainyard local`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "common/json.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;
using testing::Cluster;
using testing::JobWatch;
using testing::TempDir;

const std::string kTrainyard = std::string(TY_BIN_DIR) + "/trainyard";

std::string WriteSpec(const TempDir& dir, const std::string& name, int steps,
                      const std::string& data = "fashion_mnist: {limit: 6400}") {
  const std::string path = dir.File(name + ".yaml");
  std::ofstream(path) << "name: " << name << "\nmodel: {mlp: {sizes: [784, 64, 10]}}\n"
                      << "data: {" << data << "}\noptimizer: {sgd: {lr: 0.05}}\n"
                      << "batch_size: 32\nsteps: " << steps << "\n"
                      << "checkpoint: {every_steps: 200}\n"
                      << "parallelism: {world_size: 2}\n";
  return path;
}

testing::ProcessResult Cli(const Cluster& c, std::vector<std::string> args) {
  args.insert(args.begin(), kTrainyard);
  args.insert(args.end(), {"--coordinator", c.address()});
  return testing::RunProcess(args, 120s);
}

TEST(CliTest, SubmitWatchListDescribeAndWatchExitCodes) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  testing::ProcessResult r = Cli(cluster, {"submit", WriteSpec(dir, "good", 40), "--watch"});
  ASSERT_EQ(r.exit_code, 0) << r.err << cluster.Logs();
  const std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(id, "good-1");
  EXPECT_NE(r.err.find("RUNNING -> SUCCEEDED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 40/40 (100.0%)"), std::string::npos) << r.err;

  r = Cli(cluster, {"list", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  StatusOr<Json> listed = Json::Parse(r.out);
  ASSERT_TRUE(listed.ok()) << r.out;
  ASSERT_EQ(listed->Find("jobs")->size(), 1u);
  EXPECT_EQ((*listed->Find("jobs"))[0].Find("state")->string_value(), "SUCCEEDED");

  r = Cli(cluster, {"list", "--state", "running"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("good-1"), std::string::npos) << r.out;
  r = Cli(cluster, {"list", "--state", "bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown job state \"bogus\""), std::string::npos) << r.err;

  r = Cli(cluster, {"describe", id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("state      SUCCEEDED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0   w0 (127.0.0.1)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1   w1 (127.0.0.1)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("progress   step 40/40"), std::string::npos) << r.out;

  // --steps: each step as a line of numbers on stdout (here the finished job's last one).
  r = Cli(cluster, {"watch", id, "--steps"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("step 40/40  loss [0-9.e-]+  lr 0.05  grad_norm "));

  r = Cli(cluster, {"describe", "nosuch-9"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no job nosuch-9"), std::string::npos) << r.err;

  // A job that fails: watch exits 1 and says why.
  r = Cli(cluster, {"submit", WriteSpec(dir, "nodata", 10, "csv: {path: /nonexistent.csv}")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Cli(cluster, {"watch", "nodata-2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("-> FAILED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent.csv"), std::string::npos) << r.err;

  r = Cli(cluster, {"workers"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("w0"), std::string::npos);
  EXPECT_NE(r.out.find("w1"), std::string::npos);

  // A worker with GPUs (registered here by hand: this machine has none) shows them.
  auto channel = rpc::MakeChannel(cluster.address(), {});
  ASSERT_TRUE(channel.ok()) << channel.status();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::RegisterWorkerRequest reg;
  reg.set_name("g0");
  reg.set_host("gpu-node");
  for (int i = 0; i < 2; ++i) {
    v1::Gpu* gpu = reg.add_gpus();
    gpu->set_index(i);
    gpu->set_name("NVIDIA H200");
    gpu->set_memory_bytes(int64_t{141} << 30);
  }
  v1::RegisterWorkerResponse registered;
  ASSERT_TRUE(v1::Worker::NewStub(*channel)->RegisterWorker(&ctx, reg, &registered).ok());
  r = Cli(cluster, {"workers"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("g0 +gpu-node +yes +0 +2 x NVIDIA H200")) << r.out;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("w0 +[^ ]+ +yes +1 +- ")) << r.out;
}

TEST(CliTest, CancelWithACheckpointStopsEveryRankAtACommonStep) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(
      R"({"name":"long","model":{"mlp":{"sizes":[784,64,10]}},"data":{"fashion_mnist":{"limit":6400}},)"
      R"("optimizer":{"sgd":{}},"steps":1000000,"parallelism":{"world_size":2}})");
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(
      watch.Wait([](const v1::JobEvent& e) { return e.has_step() && e.step().step() > 10; }, 60s))
      << cluster.Logs();
  testing::ProcessResult r = Cli(cluster, {"cancel", job->id(), "--checkpoint"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cancelling"), std::string::npos) << r.out;
  ASSERT_TRUE(watch.WaitForState(v1::CANCELLED, 60s)) << watch.Describe() << cluster.Logs();
  auto done = cluster.client().GetJob(job->id());
  ASSERT_TRUE(done.ok());
  ASSERT_FALSE(done->checkpoint().empty()) << done->DebugString();  // saved on the way out
  const int64_t step = std::stoll(done->checkpoint().substr(done->checkpoint().rfind("step-") + 5));
  EXPECT_GT(step, 10);
  EXPECT_TRUE(std::filesystem::exists(done->checkpoint() + "/model.safetensors"));
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return cluster.RankPids(0).empty() && cluster.RankPids(1).empty(); }, 10s));
  // Cancelling again is an error that says why.
  r = Cli(cluster, {"cancel", job->id()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already CANCELLED"), std::string::npos) << r.err;
}

TEST(CliTest, CtrlCStopsLocalAndEverythingItStarted) {
  TempDir dir;
  testing::Subprocess local({kTrainyard, "local", WriteSpec(dir, "interrupted", 1000000),
                             "--workers", "2", "--state-dir", dir.File("state"), "-o", "json"});
  ASSERT_TRUE(local.started());
  ASSERT_TRUE(local.WaitForStderr("SCHEDULED -> RUNNING", 60s));
  std::vector<pid_t> started;
  for (pid_t p : testing::ChildrenOf(local.pid())) {
    started.push_back(p);
    for (pid_t q : testing::ChildrenOf(p)) started.push_back(q);  // the ranks
  }
  EXPECT_EQ(started.size(), 5u);  // a coordinator, two workers, two ranks
  local.Signal(SIGINT);
  testing::ProcessResult r = local.Wait(60s);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  StatusOr<Json> job = Json::Parse(r.out);
  ASSERT_TRUE(job.ok()) << r.out << r.err;
  EXPECT_EQ(job->Find("state")->string_value(), "CANCELLED");
  EXPECT_FALSE(job->Find("checkpoint")->string_value().empty());
  for (pid_t p : started) EXPECT_NE(::kill(p, 0), 0) << "pid " << p << " still runs";
}

}  // namespace
}  // namespace trainyard
