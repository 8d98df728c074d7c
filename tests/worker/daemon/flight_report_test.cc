// How a rank's flight records travel in its status line and into RankStatus
// (worker/daemon/flight_report.h): only while a collective is stuck or failed, ages relative to
// the line, and small enough for one atomic write to the daemon's pipe.
#include "worker/daemon/flight_report.h"

#include <gtest/gtest.h>
#include <limits.h>

namespace trainyard::daemon {
namespace {

using namespace std::chrono_literals;
using dist::CollectiveRecord;
using dist::CollectiveState;

CollectiveRecord Record(int64_t seq, CollectiveState state, CollectiveRecord::TimePoint issued) {
  CollectiveRecord r;
  r.seq = seq;
  r.op = "reduce_scatter";
  r.size = {262144, "bfloat16", 524288};
  r.state = state;
  r.issued = issued;
  if (state != CollectiveState::kQueued) r.started = issued + 10ms;
  if (state == CollectiveState::kDone) r.ended = issued + 30ms;
  r.phase = "allreduce_wait";
  return r;
}

TEST(FlightReportTest, RecordsRoundTripThroughTheStatusLineWithAgesBeforeIt) {
  const auto now = std::chrono::steady_clock::now();
  const Json line = Json::Object(
      {{"type", "status"},
       {"collectives", FlightRecordsJson({Record(56, CollectiveState::kDone, now - 4s),
                                          Record(57, CollectiveState::kRunning, now - 3s)},
                                         now)}});
  StatusOr<Json> parsed = Json::Parse(line.Dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  trainyard::v1::RankStatus status;
  status.add_collectives()->set_seq(1);  // replaced
  ParseFlightRecords(*parsed, &status);
  ASSERT_EQ(status.collectives_size(), 2);
  const trainyard::v1::CollectiveRecord& done = status.collectives(0);
  EXPECT_EQ(done.seq(), 56);
  EXPECT_EQ(done.op(), "reduce_scatter");
  EXPECT_EQ(done.numel(), 262144);
  EXPECT_EQ(done.dtype(), "bfloat16");
  EXPECT_EQ(done.bytes(), 524288);
  EXPECT_EQ(done.state(), "done");
  EXPECT_EQ(done.phase(), "allreduce_wait");
  EXPECT_EQ(done.issued_age_ms(), 4000);
  EXPECT_EQ(done.started_age_ms(), 3990);
  EXPECT_EQ(done.ended_age_ms(), 3970);
  const trainyard::v1::CollectiveRecord& running = status.collectives(1);
  EXPECT_EQ(running.state(), "running");
  EXPECT_EQ(running.ended_age_ms(), -1);
}

TEST(FlightReportTest, ALineWithoutRecordsClearsThem) {
  trainyard::v1::RankStatus status;
  status.add_collectives()->set_seq(9);
  ParseFlightRecords(Json::Object({{"type", "status"}}), &status);
  EXPECT_EQ(status.collectives_size(), 0);
  // Entries without an integer seq are skipped, the rest kept.
  const Json odd = Json::Object(
      {{"collectives", Json::Array({Json("x"), Json::Object({{"seq", 3}, {"op", "barrier"}})})}});
  ParseFlightRecords(odd, &status);
  ASSERT_EQ(status.collectives_size(), 1);
  EXPECT_EQ(status.collectives(0).op(), "barrier");
  EXPECT_EQ(status.collectives(0).issued_age_ms(), -1);
}

TEST(FlightReportTest, AStatusLineWithAFullReportFitsOneAtomicPipeWrite) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<CollectiveRecord> records;
  for (int64_t seq = 1000000; seq < 1000000 + static_cast<int64_t>(kReportedCollectives); ++seq) {
    records.push_back(Record(seq, CollectiveState::kRunning, now - 3600s));
  }
  Json line = Json::Object(
      {{"type", "status"},
       {"step", 1000000},
       {"phase", "allreduce_wait"},
       {"phase_age_ms", 3600000},
       {"issued", 1000015},
       {"done", 999999},
       {"collective_age_ms", 3600000},
       {"links", Json::Array({Json::Object({{"peer", "10.100.200.250"}, {"rtt_us", 123456}})})}});
  line.Set("collectives", FlightRecordsJson(records, now));
  EXPECT_LT(line.Dump().size() + 1, static_cast<size_t>(PIPE_BUF)) << line.Dump();
}

}  // namespace
}  // namespace trainyard::daemon
