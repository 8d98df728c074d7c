// WorkerLease: when a worker's silence from the coordinator outlasts its lease, and the line
// it logs then.
#include "worker/daemon/lease.h"

#include <gtest/gtest.h>

namespace trainyard::daemon {
namespace {

using namespace std::chrono_literals;
using TimePoint = WorkerLease::TimePoint;

trainyard::v1::RankStatus Rank(const std::string& job, int attempt, int rank, bool exited) {
  trainyard::v1::RankStatus s;
  s.set_job_id(job);
  s.set_attempt(attempt);
  s.set_rank(rank);
  s.set_exited(exited);
  return s;
}

TEST(WorkerLeaseTest, ExpiresOncePerSilenceLongerThanTheAnnouncedLease) {
  const TimePoint t0 = std::chrono::steady_clock::now();
  WorkerLease lease;
  lease.Renew(t0, 7500);
  EXPECT_EQ(lease.lease(), 7500ms);
  EXPECT_EQ(lease.Expired(t0 + 7500ms), std::nullopt);
  EXPECT_EQ(lease.Expired(t0 + 8200ms), 8200ms);
  EXPECT_EQ(lease.Expired(t0 + 9000ms), std::nullopt) << "the same silence reported twice";
  lease.Renew(t0 + 10s);  // an ack: the lease it names stays
  EXPECT_EQ(lease.Expired(t0 + 17s), std::nullopt);
  EXPECT_EQ(lease.Expired(t0 + 18s), 8000ms);
}

TEST(WorkerLeaseTest, AnOverrideReplacesTheCoordinatorsLeaseButNeedsOneAnnounced) {
  const TimePoint t0 = std::chrono::steady_clock::now();
  WorkerLease lease(2s);
  lease.Renew(t0, 0);  // a coordinator that sends no acks: no lease at all
  EXPECT_EQ(lease.lease(), 0ms);
  EXPECT_EQ(lease.Expired(t0 + 1h), std::nullopt);
  lease.Renew(t0, 7500);
  EXPECT_EQ(lease.lease(), 2s);
  EXPECT_EQ(lease.Expired(t0 + 2100ms), 2100ms);
}

TEST(WorkerLeaseTest, TheLogLineNamesTheSilenceTheLeaseAndEachAttemptsRunningRanks) {
  const std::string line = LeaseLostMessage(8200ms, 7500ms,
                                            {Rank("j-1", 2, 0, false), Rank("j-1", 2, 1, false),
                                             Rank("j-1", 1, 3, true), Rank("k-2", 1, 4, false)});
  EXPECT_EQ(line,
            "lost the coordinator for 8.2 s (lease 7.5 s): stopping job j-1 attempt 2 ranks 0, 1; "
            "job k-2 attempt 1 ranks 4");
  EXPECT_EQ(DescribeLease(0ms), "none");
}

}  // namespace
}  // namespace trainyard::daemon
