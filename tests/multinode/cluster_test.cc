// The service's acceptance runs on nodes in network namespaces (tests/testing/netns.h): the
// coordinator and each worker on a node of its own, ranks talking over the data network.
#include <gtest/gtest.h>

#include <set>

#include "tests/multinode/multinode.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::Net;
using testing::TempDir;

// The TCP connections established in node `node`'s namespace, as `ss` prints them.
std::string Connections(Cluster& c, int node) {
  return testing::RunProcess({"/usr/sbin/ip", "netns", "exec", c.lab()->Namespace(node),
                              "/usr/bin/ss", "-Htn", "state", "established"},
                             10s)
      .out;
}

TEST(MultinodeTest, FashionMlpOnTwoNodesTrainsOverTheDataNetwork) {
  TempDir dir;
  auto cluster = testing::StartNamespaced(dir.path(), 2);
  ASSERT_NE(cluster, nullptr);
  auto job = cluster->client().Submit(
      testing::MlpSpec("fmlp", 2, 400, 200, R"(,"eval":{"every_steps":400,"max_batches":20})"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster->client(), job->id());
  // While it trains, worker 0's rank talks to worker 1's over data0, never loopback or ctl0.
  const std::string w0 = cluster->lab()->Address(1, Net::kData);
  const std::string w1 = cluster->lab()->Address(2, Net::kData);
  std::string seen;
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        seen = Connections(*cluster, 1);
        return seen.find(w0 + ":") != std::string::npos && seen.find(w1 + ":") != std::string::npos;
      },
      60s))
      << seen << cluster->Logs();
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 240s)) << watch.Describe() << cluster->Logs();
  auto done = cluster->client().GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->attempts_size(), 1);
  const auto& ranks = done->attempts(0).ranks();
  ASSERT_EQ(ranks.size(), 2);
  EXPECT_NE(ranks[0].worker(), ranks[1].worker());
  EXPECT_GE(done->last_eval().accuracy(), 0.75) << done->DebugString();
}

TEST(MultinodeTest, KjvGptOnThreeNodes) {
  TempDir dir;
  auto cluster = testing::StartNamespaced(dir.path(), 3);
  ASSERT_NE(cluster, nullptr);
  const std::string spec =
      R"({"name":"kjv","model":{"gpt":{"context":64,"n_layer":2,"n_head":2,"n_embd":64}},)"
      R"("data":{"text":{"path":")" +
      testing::kSource +
      R"(/data/kjv.txt","vocabulary":"char","eval_fraction":0.1}},)"
      R"("optimizer":{"adamw":{"lr":0.003}},"batch_size":8,"steps":120,"seed":1,)"
      R"("eval":{"every_steps":120,"max_batches":5},"parallelism":{"world_size":3}})";
  auto job = cluster->client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster->client(), job->id());
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 300s)) << watch.Describe() << cluster->Logs();
  auto done = cluster->client().GetJob(job->id());
  ASSERT_TRUE(done.ok());
  std::set<std::string> workers;
  for (const auto& r : done->attempts(0).ranks()) workers.insert(r.worker());
  EXPECT_EQ(workers.size(), 3u);
  const auto loss = testing::LossByStep(watch.events());
  ASSERT_FALSE(loss.empty());
  EXPECT_LT(loss.rbegin()->second, 0.8 * loss.begin()->second) << watch.Describe();
}

TEST(MultinodeTest, CancelWithACheckpointAndACoordinatorRestart) {
  TempDir dir;
  auto cluster = testing::StartNamespaced(dir.path(), 2);
  ASSERT_NE(cluster, nullptr);
  auto job = cluster->client().Submit(testing::MlpSpec("long", 2, 100000, 0));
  ASSERT_TRUE(job.ok()) << job.status().message();
  {
    JobWatch watch(cluster->client(), job->id());
    ASSERT_TRUE(watch.Wait(
        [](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= 20; }, 120s))
        << watch.Describe() << cluster->Logs();
  }
  // The coordinator's node restarts: the ranks run on, and the workers re-register with them.
  cluster->coordinator().Kill(SIGKILL);
  std::string error;
  ASSERT_TRUE(cluster->StartCoordinator(&error)) << error;
  JobWatch watch(cluster->client(), job->id());
  const int64_t before = cluster->client().GetJob(job->id())->last_step().step();
  ASSERT_TRUE(watch.Wait(
      [&](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= before + 20; }, 60s))
      << watch.Describe() << cluster->Logs();
  ASSERT_TRUE(cluster->client().Cancel(job->id(), /*checkpoint=*/true).ok());
  ASSERT_TRUE(watch.WaitForState(v1::CANCELLED, 60s)) << watch.Describe() << cluster->Logs();
  auto done = cluster->client().GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->attempts_size(), 1) << done->DebugString() << cluster->Logs();
  EXPECT_FALSE(done->checkpoint().empty()) << done->DebugString();
}

}  // namespace
}  // namespace trainyard
