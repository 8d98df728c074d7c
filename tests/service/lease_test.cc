// Fencing with the real binaries on loopback: a coordinator stopped (SIGSTOP) for longer than
// the workers' lease makes them stop their ranks; once it runs again, the job's next attempt
// raises the checkpoint directory's fence (Note [Checkpoint fence]).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "tests/testing/cluster.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitUntil;

// Two ranks of a small MLP on four blobs, long enough never to finish within the test.
std::string WriteSpec(const TempDir& dir) {
  std::ofstream csv(dir.File("blobs.csv"));
  for (int i = 0; i < 256; ++i) csv << (i % 4) << "," << (i % 3) << "," << (i % 4) << "\n";
  return R"({"name":"lease","model":{"mlp":{"sizes":[2,16,4]}},"data":{"csv":{"path":")" +
         dir.File("blobs.csv") +
         R"("},"num_workers":0},"optimizer":{"sgd":{"lr":0.05}},"batch_size":8,)"
         R"("steps":5000000,"checkpoint":{"every_steps":500},)"
         R"("parallelism":{"world_size":2,"collective_timeout_seconds":60}})";
}

bool Alive(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.compare(close + 2, 1, "Z") != 0;
}

TEST(LeaseTest, AStoppedCoordinatorMakesTheWorkerStopItsRanksWithinItsLease) {
  TempDir dir;
  testing::ClusterOptions o;
  o.workers = 1;
  o.slots = 2;
  o.heartbeat_timeout = 4;  // a lease of 3 s
  Cluster cluster(dir.path(), o);
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  // The worker logs it just after the coordinator lists it as registered (what Start waits for).
  EXPECT_TRUE(WaitUntil(
      [&] { return cluster.worker(0).log().find("(lease 3.0 s)") != std::string::npos; }, 5s))
      << cluster.Logs();
  auto job = cluster.client().Submit(WriteSpec(dir));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(
      watch.Wait([](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= 20; }, 60s))
      << watch.Describe() << cluster.Logs();
  const std::vector<pid_t> ranks = cluster.RankPids(0);
  ASSERT_EQ(ranks.size(), 2u) << cluster.Logs();

  cluster.coordinator().Kill(SIGSTOP);
  const std::string lost = "lost the coordinator for ";
  const bool logged =
      WaitUntil([&] { return cluster.worker(0).log().find(lost) != std::string::npos; }, 15s);
  // Stopped: SIGTERM, then SIGKILL after the worker's grace (5 s).
  const bool stopped = WaitUntil(
      [&] { return std::none_of(ranks.begin(), ranks.end(), [](pid_t p) { return Alive(p); }); },
      15s);
  cluster.coordinator().Kill(SIGCONT);
  ASSERT_TRUE(logged) << cluster.Logs();
  EXPECT_TRUE(stopped) << cluster.Logs();
  const std::string log = cluster.worker(0).log();
  const std::string line =
      log.substr(log.find(lost), log.find('\n', log.find(lost)) - log.find(lost));
  EXPECT_NE(line.find("(lease 3.0 s): stopping job " + job->id() + " attempt 1 ranks 0, 1"),
            std::string::npos)
      << line;

  // Back: the worker was declared lost, and attempt 2 raises the checkpoint fence to 2.
  ASSERT_TRUE(watch.Wait(
      [](const v1::JobEvent& e) {
        return e.has_state() && e.state().to() == v1::RUNNING && e.state().attempt() == 2;
      },
      60s))
      << watch.Describe() << cluster.Logs();
  EXPECT_EQ(ReadFile(dir.path() + "/checkpoints/" + job->id() + "/.epoch"), "2\n");
  EXPECT_TRUE(cluster.client().Cancel(job->id(), false).ok());
}

}  // namespace
}  // namespace trainyard
