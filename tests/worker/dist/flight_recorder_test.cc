// FlightRecorder (worker/dist/flight_recorder.h): the ring of a rank's last collectives, on its
// own and as a Gloo group on loopback fills it.
#include "worker/dist/flight_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/testing/dist.h"
#include "worker/dist/process_group.h"
#include "worker/tensor/factories.h"

namespace trainyard::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

CollectiveSize Floats(int64_t n) { return {n, "float32", 4 * n}; }

TEST(FlightRecorderTest, KeepsTheLastCollectivesOldestFirstWithTheirStates) {
  FlightRecorder r;
  const char* phase = "backward";
  r.SetPhaseSource([&] { return phase; });
  r.Issued(1, "broadcast", Floats(10));
  r.Started(1);
  r.Finished(1, true);
  phase = "optimizer";
  r.Issued(2, "all_reduce", Floats(262144));
  r.Started(2);
  r.Issued(3, "barrier", {});
  const std::vector<CollectiveRecord> last = r.Last(16);
  ASSERT_EQ(last.size(), 3u);
  EXPECT_EQ(last[0].seq, 1);
  EXPECT_EQ(last[0].op, "broadcast");
  EXPECT_EQ(last[0].state, CollectiveState::kDone);
  EXPECT_EQ(last[0].phase, "backward");
  EXPECT_LE(last[0].issued, last[0].started);
  EXPECT_LE(last[0].started, last[0].ended);
  EXPECT_EQ(last[1].state, CollectiveState::kRunning);
  EXPECT_EQ(last[1].size.numel, 262144);
  EXPECT_EQ(last[1].size.bytes, 4 * 262144);
  EXPECT_EQ(last[1].phase, "optimizer");
  EXPECT_EQ(last[1].ended, CollectiveRecord::TimePoint{});
  EXPECT_EQ(last[2].state, CollectiveState::kQueued);
  EXPECT_EQ(r.Last(2).front().seq, 2);
}

TEST(FlightRecorderTest, AFullRingForgetsTheOldestAndIgnoresThem) {
  FlightRecorder r;
  const int64_t n = FlightRecorder::kCapacity + 10;
  for (int64_t seq = 1; seq <= n; ++seq) r.Issued(seq, "all_reduce", Floats(seq));
  r.Finished(5, false);  // no longer in the ring: ignored
  const std::vector<CollectiveRecord> all = r.Last(1000);
  ASSERT_EQ(all.size(), FlightRecorder::kCapacity);
  EXPECT_EQ(all.front().seq, 11);
  EXPECT_EQ(all.back().seq, n);
  for (const CollectiveRecord& c : all) {
    EXPECT_EQ(c.state, CollectiveState::kQueued) << c.seq;
    EXPECT_EQ(c.phase, "") << "no phase source";
  }
}

TEST(FlightRecorderTest, NeedsAReportWhenACollectiveIsStuckOrFailed) {
  FlightRecorder r;
  r.Issued(1, "all_reduce", Floats(4));
  r.Finished(1, true);
  r.Issued(2, "all_reduce", Floats(4));
  const auto now = Clock::now();
  EXPECT_FALSE(NeedsReport(r.Last(16), now, 1s)) << "#2 was issued just now";
  EXPECT_TRUE(NeedsReport(r.Last(16), now + 1s, 1s));
  r.Finished(2, false);
  EXPECT_TRUE(NeedsReport(r.Last(16), now, 1s)) << "#2 failed";
  r.Issued(3, "barrier", {});
  r.Finished(3, true);
  EXPECT_FALSE(NeedsReport(r.Last(1), now + 1h, 1s)) << "the failure left the last 1";
  EXPECT_STREQ(CollectiveStateName(CollectiveState::kFailed), "failed");
}

TEST(FlightRecorderTest, ManyThreadsRecordAndReadAtOnce) {
  FlightRecorder r;
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) {
      for (const CollectiveRecord& c : r.Last(16)) ASSERT_GT(c.seq, 0);
    }
  });
  std::thread finisher([&] {
    for (int64_t seq = 1; seq <= 2000; ++seq) r.Finished(seq, true);
  });
  for (int64_t seq = 1; seq <= 2000; ++seq) r.Issued(seq, "all_reduce", Floats(1));
  finisher.join();
  stop = true;
  reader.join();
  EXPECT_EQ(r.Last(1).back().seq, 2000);
}

#ifdef TY_HAVE_GLOO
TEST(FlightRecorderTest, AGlooGroupRecordsEachCollectiveWithThePhaseAtIssue) {
  testing::RunRanks(2, [](int rank, std::shared_ptr<ProcessGroup> group) {
    group->flight_recorder().SetPhaseSource([] { return "allreduce_wait"; });
    Tensor t = Full({1000}, 1.0f);
    ASSERT_TRUE(WaitFor(*group, *group->AllReduce(t)).ok());
    ASSERT_TRUE(WaitFor(*group, *group->Barrier()).ok());
    const std::vector<CollectiveRecord> last = group->flight_recorder().Last(16);
    ASSERT_EQ(last.size(), 2u) << "rank " << rank;
    EXPECT_EQ(last[0].seq, 1);
    EXPECT_EQ(last[0].op, "all_reduce");
    EXPECT_EQ(last[0].size.numel, 1000);
    EXPECT_EQ(last[0].size.dtype, "float32");
    EXPECT_EQ(last[0].size.bytes, 4000);
    EXPECT_EQ(last[0].state, CollectiveState::kDone);
    EXPECT_EQ(last[0].phase, "allreduce_wait");
    EXPECT_NE(last[0].started, CollectiveRecord::TimePoint{});
    EXPECT_EQ(last[1].op, "barrier");
    EXPECT_EQ(last[1].state, CollectiveState::kDone);
    EXPECT_EQ(group->collectives_done(), 2);
  });
}
#endif

}  // namespace
}  // namespace trainyard::dist
