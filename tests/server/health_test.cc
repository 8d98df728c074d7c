#include "server/health.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr double kTimeoutSeconds = 60;

// A rank that reported `report_age_ms` ago, `phase_age_ms` into `phase`, having finished
// collective `done` of `issued`, the oldest unfinished one waiting `collective_age_ms`.
RankView Rank(int rank, const std::string& phase, int64_t report_age_ms, int64_t phase_age_ms,
              int64_t issued, int64_t done, int64_t collective_age_ms) {
  RankView v;
  v.placement.set_rank(rank);
  v.placement.set_worker("w" + std::to_string(rank));
  v.placement.set_host("h" + std::to_string(rank));
  v.status.set_rank(rank);
  v.status.set_step(41);
  v.status.set_phase(phase);
  v.status.set_report_age_ms(report_age_ms);
  v.status.set_phase_age_ms(phase_age_ms);
  v.status.set_collectives_issued(issued);
  v.status.set_collectives_done(done);
  v.status.set_collective_age_ms(collective_age_ms);
  v.reported = true;
  return v;
}

// A fresh rank waiting in collective #8 for `ms`.
RankView Waiter(int rank, int64_t ms) { return Rank(rank, "allreduce_wait", 500, ms, 8, 7, ms); }

TEST(FindHangTest, NamesTheSilentRankWhileTheOthersWaitInACollective) {
  const std::vector<RankView> ranks = {
      Waiter(0, 70000), Rank(1, "backward", 65000, 65000, 7, 7, 1000), Waiter(2, 70000)};
  auto d = FindHang(ranks, kTimeoutSeconds);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->kind(), trainyard::v1::Diagnosis::HANG);
  EXPECT_EQ(d->rank(), 1);
  EXPECT_EQ(d->worker(), "w1");
  EXPECT_EQ(d->host(), "h1");
  EXPECT_EQ(d->phase(), "backward");
  EXPECT_EQ(d->step(), 41);
  EXPECT_EQ(d->collective_seq(), 8);
  EXPECT_DOUBLE_EQ(d->seconds(), 65.0);
  EXPECT_EQ(d->message(),
            "rank 1 on w1 (h1) is hung: no report for 65.0 s, last in phase backward at step "
            "41, while ranks 0, 2 wait in collective #8");
}

// A rank stopped while it waited itself (SIGSTOP in the middle of an all-reduce) looks like a
// long waiter until its reports go stale; the live rank, newer in the same wait, is not hung.
TEST(FindHangTest, ARankStoppedWhileWaitingIsNamedNotTheRankWaitingForIt) {
  constexpr double kTimeout = 5;
  // 3 s after the stop: rank 1 is half stale, rank 0 has waited 4 s of its 6 s in the phase.
  std::vector<RankView> ranks = {Rank(0, "allreduce_wait", 300, 6000, 6, 5, 4000),
                                 Rank(1, "allreduce_wait", 3000, 8000, 6, 5, 8000)};
  EXPECT_FALSE(FindHang(ranks, kTimeout).has_value());
  // 5 s after the stop: rank 0 has waited the timeout, rank 1 has said nothing for it.
  ranks = {Rank(0, "allreduce_wait", 300, 8000, 6, 5, 6000),
           Rank(1, "allreduce_wait", 5200, 10200, 6, 5, 10200)};
  auto d = FindHang(ranks, kTimeout);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank(), 1);
  EXPECT_EQ(d->collective_seq(), 6);
}

TEST(FindHangTest, NamesARankThatNeverReported) {
  RankView never;
  never.placement.set_rank(1);
  never.placement.set_worker("w1");
  auto d = FindHang({Waiter(0, 61000), never}, kTimeoutSeconds);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank(), 1);
  EXPECT_EQ(d->phase(), "starting");
  EXPECT_THAT(d->message(), HasSubstr("while rank 0 waits in collective #8"));
}

TEST(FindHangTest, NamesARankStuckInOnePhaseThatStillReports) {
  auto d = FindHang({Waiter(0, 70000), Rank(1, "data", 500, 65000, 7, 7, 1000)}, kTimeoutSeconds);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank(), 1);
  EXPECT_THAT(d->message(), HasSubstr("in phase data for 65.0 s"));
}

TEST(FindHangTest, NamesNobodyWhenNobodyWaitedForTheTimeout) {
  // Rank 1 is silent, but the others have waited 30 s of the 60.
  EXPECT_FALSE(
      FindHang({Waiter(0, 30000), Rank(1, "backward", 65000, 65000, 7, 7, 1000), Waiter(2, 30000)},
               kTimeoutSeconds)
          .has_value());
}

TEST(FindHangTest, NamesNoRankWhenTheOnlyWaiterIsSilentItself) {
  // A waiter whose reports stopped says nothing about the others: rank 1 is not named hung
  // "while rank 0 waits"; the job as a whole made no progress (Note [A job that makes no
  // progress]).
  auto d = FindHang({Rank(0, "allreduce_wait", 65000, 70000, 8, 7, 70000),
                     Rank(1, "backward", 65000, 65000, 7, 7, 1000)},
                    kTimeoutSeconds);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->collective_seq(), 0);
  EXPECT_THAT(d->message(), Not(HasSubstr("waits in collective")));
  EXPECT_THAT(d->message(), StartsWith("no rank made progress for"));
}

TEST(FindHangTest, EvaluationAndCheckpointingAreProgressNotAHang) {
  // Only rank 0 evaluates; the others wait for it in the next collective.
  EXPECT_FALSE(
      FindHang({Rank(0, "evaluate", 500, 120000, 7, 7, 1000), Waiter(1, 120000)}, kTimeoutSeconds)
          .has_value());
  EXPECT_FALSE(
      FindHang({Rank(0, "checkpoint", 500, 120000, 7, 7, 1000), Waiter(1, 120000)}, kTimeoutSeconds)
          .has_value());
}

TEST(FindHangTest, IgnoresRanksThatExited) {
  RankView exited = Rank(1, "done", 65000, 65000, 7, 7, 1000);
  exited.status.set_exited(true);
  // Rank 0 progresses: nothing to say, the silent rank 1 has exited.
  EXPECT_FALSE(FindHang({Waiter(0, 30000), exited}, kTimeoutSeconds).has_value());
  // Rank 0 waits for 70 s: the job made no progress, and only rank 0 is named.
  auto d = FindHang({Waiter(0, 70000), exited}, kTimeoutSeconds);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank(), 0);
  EXPECT_THAT(d->message(), Not(HasSubstr("rank 1")));
}

// Note [A job that makes no progress].

TEST(FindHangTest, EveryRankStoppedIsAHangNamingEachRank) {
  // SIGSTOP on both ranks: neither waits, both went silent (rank 1 first).
  auto d = FindHang({Rank(0, "forward", 61000, 61200, 7, 7, 61500),
                     Rank(1, "backward", 64000, 64100, 8, 7, 64100)},
                    kTimeoutSeconds);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->kind(), trainyard::v1::Diagnosis::HANG);
  EXPECT_EQ(d->rank(), 1) << "the rank quiet the longest";
  EXPECT_EQ(d->worker(), "w1");
  EXPECT_EQ(d->host(), "h1");
  EXPECT_EQ(d->phase(), "backward");
  EXPECT_EQ(d->step(), 41);
  EXPECT_EQ(d->collective_seq(), 0);
  EXPECT_DOUBLE_EQ(d->seconds(), 61.2) << "since the job's last progress";
  EXPECT_EQ(d->message(),
            "no rank made progress for 61.2 s, over the hang timeout of 60.0 s: rank 0 on w0 "
            "(h0) no report for 61.0 s, last in phase forward at step 41; rank 1 on w1 (h1) no "
            "report for 64.0 s, last in phase backward at step 41, in collective #8");
}

TEST(FindHangTest, TheOnlyRankOfAOneRankJobStuckInAPhaseIsAHang) {
  EXPECT_FALSE(FindHang({Rank(0, "data", 500, 59000, 0, 0, 59000)}, kTimeoutSeconds).has_value());
  auto d = FindHang({Rank(0, "data", 500, 61000, 0, 0, 61000)}, kTimeoutSeconds);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank(), 0);
  EXPECT_DOUBLE_EQ(d->seconds(), 61.0);
  EXPECT_EQ(d->message(),
            "no rank made progress for 61.0 s, over the hang timeout of 60.0 s: rank 0 on w0 "
            "(h0) in phase data for 61.0 s at step 41");
}

TEST(FindHangTest, ARankThatChangesPhaseOrCompletesCollectivesMakesProgress) {
  // Rank 1 is silent, but rank 0 moved on to a new phase 2 s ago.
  EXPECT_FALSE(FindHang({Rank(0, "forward", 500, 2000, 7, 7, 65000),
                         Rank(1, "backward", 65000, 65000, 7, 7, 65000)},
                        kTimeoutSeconds)
                   .has_value());
  // A long backward whose gradient buckets keep completing.
  EXPECT_FALSE(
      FindHang({Rank(0, "backward", 500, 90000, 9, 8, 3000)}, kTimeoutSeconds).has_value());
}

TEST(FindHangTest, StartingEvaluatingAndCheckpointingGetTenTimesTheTimeout) {
  for (const std::string phase : {"starting", "evaluate", "checkpoint"}) {
    const int64_t allowed_ms = static_cast<int64_t>(kSlowPhaseFactor * kTimeoutSeconds * 1000);
    EXPECT_FALSE(
        FindHang({Rank(0, phase, 500, allowed_ms - 1000, 0, 0, allowed_ms - 1000)}, kTimeoutSeconds)
            .has_value())
        << phase;
    auto d = FindHang({Rank(0, phase, 500, allowed_ms + 1000, 0, 0, allowed_ms + 1000)},
                      kTimeoutSeconds);
    ASSERT_TRUE(d.has_value()) << phase;
    EXPECT_THAT(d->message(), HasSubstr("rank 0 on w0 (h0) in phase " + phase)) << phase;
    // A rank whose reports stopped is stopped, whatever its phase.
    EXPECT_TRUE(FindHang({Rank(0, phase, 61000, 61000, 0, 0, 61000)}, kTimeoutSeconds).has_value())
        << phase;
  }
}

TEST(FindHangTest, ARankNotHeardFromYetGivesNoVerdictOnTheJob) {
  RankView unknown;  // after a coordinator restart, before its worker re-registered
  unknown.placement.set_rank(1);
  EXPECT_FALSE(
      FindHang({Rank(0, "data", 500, 61000, 0, 0, 61000), unknown}, kTimeoutSeconds).has_value());
}

TEST(StragglerDetectorTest, FlagsARankThreeTimesSlowerThanTheOtherOfTwo) {
  StragglerDetector d(/*world_size=*/2, /*factor=*/2, /*window=*/3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(d.Update(), IsEmpty()) << "flagged before every rank had a full window";
    d.AddStep(0, 0.1);
    d.AddStep(1, 0.3);
  }
  std::vector<StragglerDetector::Change> changes = d.Update();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_TRUE(changes[0].flagged);
  EXPECT_NEAR(changes[0].mean_seconds, 0.3, 1e-12);
  EXPECT_NEAR(changes[0].median_seconds, 0.1, 1e-12);
  EXPECT_THAT(d.Flagged(), ElementsAre(1));
  EXPECT_THAT(d.Update(), IsEmpty()) << "a flag is reported when it changes, not every time";
  EXPECT_THAT(d.Flagged(), ElementsAre(1));
}

TEST(StragglerDetectorTest, ClearsTheFlagWhenTheRankCatchesUp) {
  StragglerDetector d(2, 2, 3);
  for (int i = 0; i < 3; ++i) {
    d.AddStep(0, 0.1);
    d.AddStep(1, 0.3);
  }
  ASSERT_EQ(d.Update().size(), 1u);
  for (int i = 0; i < 3; ++i) d.AddStep(1, 0.1);  // the window now holds only fast steps
  std::vector<StragglerDetector::Change> changes = d.Update();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_FALSE(changes[0].flagged);
  EXPECT_THAT(d.Flagged(), IsEmpty());
}

TEST(StragglerDetectorTest, DoesNotFlagARankWithinTheFactor) {
  StragglerDetector d(2, 2, 3);
  for (int i = 0; i < 3; ++i) {
    d.AddStep(0, 0.1);
    d.AddStep(1, 0.15);
  }
  EXPECT_THAT(d.Update(), IsEmpty());
  EXPECT_THAT(d.Flagged(), IsEmpty());
}

TEST(StragglerDetectorTest, DoesNotFlagMillisecondStepsThatDifferByNoiseAlone) {
  StragglerDetector d(2, 2, 3);
  for (int i = 0; i < 3; ++i) {
    d.AddStep(0, 0.001);
    d.AddStep(1, 0.003);  // 3x, but under kMinExcessSeconds slower
  }
  EXPECT_THAT(d.Update(), IsEmpty());
  EXPECT_THAT(d.Flagged(), IsEmpty());
}

// Three hosts in a ring; host b's links (a->b, b->c) take `slow` seconds, c->a 0.3 ms.
void AddRing(SlowLinkDetector* d, double slow, Clock::TimePoint now) {
  d->Add("a", "b", slow, now);
  d->Add("b", "c", slow, now);
  d->Add("c", "a", 0.0003, now);
}

TEST(SlowLinkDetectorTest, NamesTheHostEveryOneOfWhoseLinksIsSlow) {
  FakeClock clock;
  SlowLinkDetector d(2);
  AddRing(&d, 0.015, clock.Now());
  const auto changes = d.Update(clock.Now());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].host, "b");
  EXPECT_TRUE(changes[0].flagged);
  EXPECT_DOUBLE_EQ(changes[0].rtt_seconds, 0.015);
  EXPECT_DOUBLE_EQ(changes[0].others_seconds, 0.0003);
  EXPECT_THAT(d.Flagged(), ElementsAre("b"));
  EXPECT_THAT(d.Update(clock.Now()), IsEmpty());  // only changes
  // The link recovers: the flag clears.
  AddRing(&d, 0.0004, clock.Now());
  const auto cleared = d.Update(clock.Now());
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_FALSE(cleared[0].flagged);
  EXPECT_THAT(d.Flagged(), IsEmpty());
}

TEST(SlowLinkDetectorTest, NeedsThreeHostsAndAnExcessAboveNoise) {
  FakeClock clock;
  SlowLinkDetector two(2);
  two.Add("a", "b", 0.5, clock.Now());  // one link cannot say which end is slow
  two.Add("b", "a", 0.5, clock.Now());
  EXPECT_THAT(two.Update(clock.Now()), IsEmpty());
  SlowLinkDetector noisy(2);
  AddRing(&noisy, 0.003, clock.Now());  // 10x, but under kMinExcessSeconds
  EXPECT_THAT(noisy.Update(clock.Now()), IsEmpty());
}

TEST(SlowLinkDetectorTest, ForgetsLinksThatStoppedReporting) {
  FakeClock clock;
  SlowLinkDetector d(2);
  AddRing(&d, 0.05, clock.Now());
  ASSERT_EQ(d.Update(clock.Now()).size(), 1u);
  clock.Advance(SlowLinkDetector::kFreshFor + std::chrono::seconds(1));
  const auto changes = d.Update(clock.Now());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].flagged);
}

}  // namespace
}  // namespace trainyard::server
