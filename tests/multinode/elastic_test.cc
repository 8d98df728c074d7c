// An elastic job across nodes in network namespaces (docs/design/009-elastic.md): a node's
// worker killed with SIGKILL, the survivors regroup over the data network without a restart,
// and the job grows back when the worker returns.
#include <gtest/gtest.h>

#include <chrono>

#include "tests/multinode/multinode.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::JobWatch;
using testing::TempDir;

bool IsRegroup(const v1::JobEvent& e) {
  return e.has_state() && e.state().reason().find("regroup") != std::string::npos;
}

// Step events after the first regroup event.
int StepsAfterFirstRegroup(const std::vector<v1::JobEvent>& events) {
  bool after = false;
  int steps = 0;
  for (const auto& e : events) {
    after = after || IsRegroup(e);
    steps += after && e.has_step();
  }
  return steps;
}

TEST(MultinodeElasticTest, AKilledNodesWorkerShrinksTheGroupAndItGrowsBack) {
  TempDir dir;
  auto cluster = testing::StartNamespaced(dir.path(), 3);
  ASSERT_NE(cluster, nullptr);
  const std::string spec =
      R"({"name":"elastic","model":{"gpt":{"context":32,"n_layer":1,"n_head":2,"n_embd":32}},)"
      R"("data":{"text":{"path":")" +
      testing::kSource +
      R"(/data/kjv.txt"},"num_workers":0},"optimizer":{"adamw":{"lr":0.001}},"batch_size":8,)"
      R"("num_threads":1,"steps":100000,"seed":1,"parallelism":{"world_size":3,)"
      R"("min_world_size":2,"collective_timeout_seconds":15}})";
  auto job = cluster->client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster->client(), job->id());
  ASSERT_TRUE(
      watch.Wait([](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= 20; }, 180s))
      << watch.Describe() << cluster->Logs();
  const auto killed = std::chrono::steady_clock::now();
  cluster->worker(1).Kill(SIGKILL);
  ASSERT_TRUE(testing::WaitUntil([&] { return StepsAfterFirstRegroup(watch.events()) >= 2; }, 60s))
      << watch.Describe() << cluster->Logs();
  std::printf(
      "[ figures ] across namespaced nodes: kill -9 of a worker to the group training "
      "again: %.2f s\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  auto shrunk = cluster->client().GetJob(job->id());
  ASSERT_TRUE(shrunk.ok());
  EXPECT_EQ(shrunk->current_world_size(), 2);
  EXPECT_EQ(shrunk->restarts(), 0);
  cluster->StartWorker(1);
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        auto j = cluster->client().GetJob(job->id());
        return j.ok() && j->current_world_size() == 3;
      },
      90s))
      << watch.Describe() << cluster->Logs();
  auto grown = cluster->client().GetJob(job->id());
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->restarts(), 0);
  ASSERT_TRUE(cluster->client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 60s)) << watch.Describe();
}

}  // namespace
}  // namespace trainyard
