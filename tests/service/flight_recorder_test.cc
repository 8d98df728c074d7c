// The collective flight recorder end to end (Note [Collective flight recorder] in
// server/collective_report.h), with the real binaries on loopback: one rank of three stopped
// with SIGSTOP mid-run is named, by the coordinator's collective report, as missing from the
// collective the two others wait in, within the hang timeout; `trainyard debug JOB
// --collectives` prints the table and `trainyard describe` the verdict. Also the CLI's table
// format on its own (CollectiveTable).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <optional>

#include "client/debug_command.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;
using testing::Cluster;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::JobWatch;
using testing::TempDir;

const std::string kTrainyard = std::string(TY_BIN_DIR) + "/trainyard";
constexpr int kHangTimeoutSeconds = 5;

// Fashion-MNIST through a small MLP on three ranks, long enough never to finish here.
std::string Spec() {
  return R"({"name":"stopped","model":{"mlp":{"sizes":[784,128,10]}},)"
         R"("data":{"fashion_mnist":{"limit":12800},"num_workers":0},)"
         R"("optimizer":{"sgd":{"lr":0.05}},"batch_size":32,"steps":100000,)"
         R"("parallelism":{"world_size":3,"collective_timeout_seconds":60},)"
         R"("fault_tolerance":{"hang_timeout_seconds":)" +
         std::to_string(kHangTimeoutSeconds) + "}}";
}

// The first collective report among the watch's events that `match` accepts.
std::optional<v1::CollectiveReport> FindReport(
    JobWatch& w, const std::function<bool(const v1::CollectiveReport&)>& match,
    std::chrono::milliseconds timeout) {
  auto matches = [&](const v1::JobEvent& e) {
    return e.has_collectives() && match(e.collectives());
  };
  if (!w.Wait(matches, timeout)) return std::nullopt;
  for (const v1::JobEvent& e : w.events()) {
    if (matches(e)) return e.collectives();
  }
  return std::nullopt;
}

testing::ProcessResult Cli(const Cluster& c, std::vector<std::string> args) {
  args.insert(args.begin(), kTrainyard);
  args.insert(args.end(), {"--coordinator", c.address()});
  return testing::RunProcess(args, 60s);
}

TEST(FlightRecorderTest, AStoppedRankIsNamedMissingFromTheCollectiveTheOthersWaitIn) {
  TempDir dir;
  testing::ClusterOptions options;
  options.workers = 3;
  Cluster cluster(dir.path(), options);
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto job = cluster.client().Submit(Spec());
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(watch.Wait(
      [](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= 200; }, 120s))
      << watch.Describe() << cluster.Logs();
  auto described = cluster.client().GetJob(job->id());
  ASSERT_TRUE(described.ok());
  int stopped_rank = -1;
  for (const auto& p : described->attempts(0).ranks()) {
    if (p.worker() == "w1") stopped_rank = p.rank();
  }
  ASSERT_GE(stopped_rank, 0) << described->DebugString();
  std::vector<pid_t> pids = cluster.RankPids(1);
  ASSERT_EQ(pids.size(), 1u);
  const int64_t stopped_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  ::kill(pids[0], SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();

  // Named within the hang timeout (and a margin for heartbeats), before the hang verdict: maybe
  // first as "missing" (its last report, from just before the stop, is still fresh), then as
  // "silent".
  const std::optional<v1::CollectiveReport> early = FindReport(
      watch,
      [&](const v1::CollectiveReport& r) {
        return r.time_ms() >= stopped_ms && r.missing_size() == 1 &&
               r.rows(r.missing(0)).state() == "silent";
      },
      std::chrono::seconds(kHangTimeoutSeconds + 3));
  const auto named_after = std::chrono::steady_clock::now() - stopped;
  ::kill(pids[0], SIGCONT);  // from here the abort may kill it
  ASSERT_TRUE(early.has_value()) << watch.Describe() << cluster.Logs();
  EXPECT_LT(named_after, std::chrono::seconds(kHangTimeoutSeconds + 3));
  EXPECT_THAT(early->missing(), ElementsAre(stopped_rank)) << early->ShortDebugString();
  // The two others wait in it, or (in a ring, when the stopped rank's data reached one of them
  // before it stopped) one got through and waits in the next.
  ASSERT_EQ(early->rows_size(), 3);
  EXPECT_GE(early->waiting_size(), 1) << early->ShortDebugString();
  for (const v1::CollectiveRow& row : early->rows()) {
    if (row.rank() == stopped_rank) continue;
    EXPECT_TRUE(row.state() == "waiting" || (row.state() == "ahead" && row.issued() > row.done()))
        << early->ShortDebugString();
  }
  EXPECT_GT(early->seq(), 0);
  EXPECT_EQ(early->op(), "all_reduce") << early->ShortDebugString();
  EXPECT_THAT(early->verdict(), HasSubstr("rank " + std::to_string(stopped_rank) +
                                          " on w1 (127.0.0.1) is missing from all_reduce #"));
  EXPECT_EQ(early->rows(stopped_rank).state(), "silent");

  // The CLI's views of it.
  testing::ProcessResult r = Cli(cluster, {"debug", job->id(), "--collectives"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("is missing from all_reduce #")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("RANK  WORKER")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("w1             silent")) << r.out;
  EXPECT_THAT(r.out, HasSubstr(" waiting ")) << r.out;
  r = Cli(cluster, {"describe", job->id()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("collectives attempt 1: rank " + std::to_string(stopped_rank)))
      << r.out;
  ASSERT_TRUE(cluster.client().Cancel(job->id(), false).ok());
  EXPECT_TRUE(watch.WaitForState(v1::CANCELLED, 30s)) << watch.Describe();
}

TEST(FlightRecorderTest, TheDebugTableHasOneRowPerRank) {
  v1::CollectiveReport r;
  r.set_attempt(2);
  r.set_time_ms(1765065600000);  // 2025-12-07 00:00:00 UTC
  r.set_hang(true);
  r.set_verdict("rank 1 on w1 (h1) is missing from all_reduce #57 (262144 float32): ...");
  v1::CollectiveRow* row = r.add_rows();
  row->set_rank(0);
  row->set_worker("w0");
  row->set_state("waiting");
  row->set_seq(57);
  row->set_op("all_reduce");
  row->set_numel(262144);
  row->set_dtype("float32");
  row->set_phase("backward");
  row->set_step(12);
  row->set_seconds(4.04);
  row = r.add_rows();
  row->set_rank(1);
  row->set_worker("w1");
  row->set_state("silent");
  row->set_seq(56);
  row->set_phase("forward");
  row->set_step(12);
  row->set_seconds(4.1);
  EXPECT_EQ(client::CollectiveTable(r),
            "attempt 2, 2025-12-07 00:00:00 UTC, at the hang verdict\n"
            "rank 1 on w1 (h1) is missing from all_reduce #57 (262144 float32): ...\n\n"
            "RANK  WORKER         STATE       SEQ OP              SIZE               "
            "PHASE              STEP      FOR\n"
            "0     w0             waiting      57 all_reduce      262144 float32     "
            "backward             12    4.0 s\n"
            "1     w1             silent       56 -               -                  "
            "forward              12    4.1 s\n");
}

}  // namespace
}  // namespace trainyard
