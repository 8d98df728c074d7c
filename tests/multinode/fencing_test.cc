// Fencing across a partition that heals after the new attempt started: a worker cut off from
// the coordinator keeps its rank running (its lease is set far too long, as a stuck or buggy
// worker's would be), the coordinator starts attempt 2 elsewhere, and only the attempt epoch
// keeps the old rank from committing checkpoints or metrics (Note [Checkpoint fence]).
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "common/json.h"
#include "tests/multinode/multinode.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::JobWatch;
using testing::Net;
using testing::TempDir;

// (step, attempt) of every checkpoint in `dir`, from their manifests.
std::vector<std::pair<int64_t, int64_t>> Checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    StatusOr<Json> m = Json::Parse(testing::ReadFile(entry.path().string() + "/manifest.json"));
    if (!m.ok()) continue;
    const Json* attempt = m->Find("attempt");
    out.emplace_back(std::stoll(name.substr(5)), attempt ? attempt->int_value() : 0);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(FencingTest, APartitionedAttemptNeverCommitsAfterTheNextOneStarted) {
  TempDir dir;
  auto cluster = testing::StartNamespaced(dir.path(), 2, {"--lease", "600"}, /*heartbeat=*/6);
  ASSERT_NE(cluster, nullptr);
  auto job = cluster->client().Submit(testing::MlpSpec("fenced", 1, 12000, 200));
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster->client(), job->id());
  ASSERT_TRUE(watch.Wait([](const v1::JobEvent& e) { return !e.checkpoint().empty(); }, 120s))
      << watch.Describe() << cluster->Logs();
  auto j = cluster->client().GetJob(job->id());
  const int old = std::stoi(j->attempts(0).ranks(0).worker().substr(1));
  const std::string ckpt_dir = dir.path() + "/checkpoints/" + job->id();
  std::string error;
  ASSERT_TRUE(cluster->lab()->SetLink(old + 1, Net::kControl, false, &error));
  // The coordinator gives up on the worker and starts attempt 2 on the other one, whose rank
  // raises the fence; the old rank, still training, has its next commit refused and exits.
  ASSERT_TRUE(watch.Wait(
      [](const v1::JobEvent& e) {
        return e.has_state() && e.state().to() == v1::RUNNING && e.state().attempt() == 2;
      },
      60s))
      << watch.Describe() << cluster->Logs();
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        return cluster->worker(old).log().find("is fenced at attempt 2") != std::string::npos;
      },
      60s))
      << cluster->Logs();
  EXPECT_TRUE(testing::WaitUntil([&] { return cluster->RankPids(old).empty(); }, 30s));
  EXPECT_EQ(testing::ReadFile(ckpt_dir + "/.epoch"), "2\n");
  // The partition heals: the old worker comes back; nothing of attempt 1 is accepted.
  ASSERT_TRUE(cluster->lab()->SetLink(old + 1, Net::kControl, true, &error));
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 240s)) << watch.Describe() << cluster->Logs();
  EXPECT_TRUE(testing::WaitUntil([&] { return cluster->AliveWorkers() == 2; }, 60s))
      << cluster->Logs();
  const auto events = watch.events();
  testing::ExpectContinuousLoss(events, 2);
  // After attempt 2's first step, steps only go up: no report of attempt 1 got in.
  const int64_t resumed = testing::FirstStepOfAttempt(events, 2);
  bool in = false;
  int64_t last = 0;
  for (const auto& e : events) {
    if (e.has_step() && e.step().step() == resumed) in = true;
    if (!in || !e.has_step()) continue;
    EXPECT_GT(e.step().step(), last) << "a step out of order: a stale attempt's report";
    last = e.step().step();
  }
  EXPECT_EQ(last, 12000);
  // Every checkpoint at or after attempt 2's resume point is attempt 2's.
  for (const auto& [step, attempt] : Checkpoints(ckpt_dir)) {
    if (step >= resumed) {
      EXPECT_EQ(attempt, 2) << "step " << step;
    }
  }
  auto done = cluster->client().GetJob(job->id());
  EXPECT_EQ(done->attempts_size(), 2);
  std::cout << "FIGURE fencing: attempt 2 resumed at step " << resumed << "; the old rank's log: "
            << (cluster->worker(old).log().find("refused") != std::string::npos ? "commit refused"
                                                                                : "stale start")
            << "\n";
}

}  // namespace
}  // namespace trainyard
