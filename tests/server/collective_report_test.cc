// The cross-rank collective report (server/collective_report.h, Note [Collective flight
// recorder]): which rank is missing from the collective the others wait in, from the ranks' last
// reports and flight records, without a coordinator or a network.
#include "server/collective_report.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using trainyard::v1::CollectiveRecord;
using trainyard::v1::CollectiveReport;

constexpr int64_t kSilentAfterMs = 2500;

// Rank `rank` on worker "w<rank>" (host "h<rank>"), reported `age_ms` ago in `phase` at step 12,
// having issued collectives up to `issued` and completed those up to `done`.
RankView Rank(int rank, int64_t issued, int64_t done, const std::string& phase = "allreduce_wait",
              int64_t age_ms = 200) {
  RankView v;
  v.placement.set_rank(rank);
  v.placement.set_worker("w" + std::to_string(rank));
  v.placement.set_host("h" + std::to_string(rank));
  v.status.set_rank(rank);
  v.status.set_step(12);
  v.status.set_phase(phase);
  v.status.set_collectives_issued(issued);
  v.status.set_collectives_done(done);
  v.status.set_report_age_ms(age_ms);
  v.status.set_phase_age_ms(4100);
  v.status.set_collective_age_ms(3900);
  v.reported = true;
  return v;
}

// Adds the record of all_reduce `seq` of `numel` float32, issued `issued_ms` before the report.
void AddRecord(RankView* v, int64_t seq, int64_t numel, int64_t issued_ms,
               const std::string& state = "running", const std::string& op = "all_reduce") {
  CollectiveRecord* c = v->status.add_collectives();
  c->set_seq(seq);
  c->set_op(op);
  c->set_numel(numel);
  c->set_dtype("float32");
  c->set_bytes(numel * 4);
  c->set_state(state);
  c->set_phase("backward");
  c->set_issued_age_ms(issued_ms);
  c->set_started_age_ms(issued_ms);
  c->set_ended_age_ms(-1);
}

TEST(CollectiveReportTest, NamesAStoppedRankMissingFromTheCollectiveTheOthersWaitIn) {
  std::vector<RankView> ranks = {Rank(0, 57, 56), Rank(1, 56, 56, "backward", 3100),
                                 Rank(2, 58, 56)};
  AddRecord(&ranks[0], 57, 262144, 3800);
  AddRecord(&ranks[2], 57, 262144, 3700);
  AddRecord(&ranks[2], 58, 1024, 3600, "queued");
  const std::optional<CollectiveReport> r = BuildCollectiveReport(ranks, kSilentAfterMs);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->seq(), 57);
  EXPECT_EQ(r->op(), "all_reduce");
  EXPECT_EQ(r->numel(), 262144);
  EXPECT_THAT(r->missing(), ElementsAre(1));
  EXPECT_THAT(r->waiting(), ElementsAre(0, 2));
  EXPECT_EQ(r->verdict(),
            "rank 1 on w1 (h1) is missing from all_reduce #57 (262144 float32): no report for "
            "3.1 s (stopped or dead?), last in phase backward at step 12, its last collective "
            "issued collective #56; ranks 0, 2 wait in it for 4.0 s");
  ASSERT_EQ(r->rows_size(), 3);
  EXPECT_EQ(r->rows(1).state(), "silent");
  EXPECT_EQ(r->rows(1).worker(), "w1");
  EXPECT_DOUBLE_EQ(r->rows(1).seconds(), 3.1);
  // A waiting rank's row: the collective, its size, the phase it was issued in, how long.
  EXPECT_EQ(r->rows(0).state(), "waiting");
  EXPECT_EQ(r->rows(0).seq(), 57);
  EXPECT_EQ(r->rows(0).op(), "all_reduce");
  EXPECT_EQ(r->rows(0).phase(), "backward");
  EXPECT_DOUBLE_EQ(r->rows(0).seconds(), 4.0);  // issued 3.8 s before a report 0.2 s old
}

TEST(CollectiveReportTest, NamesARankStillReportingInAnotherPhaseAsMissing) {
  std::vector<RankView> ranks = {Rank(0, 57, 56), Rank(1, 57, 56), Rank(2, 56, 56, "forward")};
  AddRecord(&ranks[0], 57, 262144, 3800);
  const std::optional<CollectiveReport> r = BuildCollectiveReport(ranks, kSilentAfterMs);
  ASSERT_TRUE(r.has_value());
  EXPECT_THAT(r->missing(), ElementsAre(2));
  EXPECT_EQ(r->rows(2).state(), "missing");
  EXPECT_EQ(r->rows(2).seq(), 56);
  EXPECT_THAT(r->verdict(), HasSubstr("rank 2 on w2 (h2) is missing from all_reduce #57 (262144 "
                                      "float32): it is in phase forward at step 12 for 4.1 s"));
  // Rank 1 sent no records: its wait dates from its last completed collective.
  EXPECT_EQ(r->rows(1).state(), "waiting");
  EXPECT_DOUBLE_EQ(r->rows(1).seconds(), 3.9);
  EXPECT_THAT(r->verdict(), HasSubstr("ranks 0, 1 wait in it for 4.0 s"));
}

TEST(CollectiveReportTest, EveryRankInsideTheCollectiveNamesNobody) {
  std::vector<RankView> ranks = {Rank(0, 9, 8), Rank(1, 9, 8)};
  AddRecord(&ranks[0], 9, 10, 5000);
  const std::optional<CollectiveReport> r = BuildCollectiveReport(ranks, kSilentAfterMs);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->missing().empty());
  EXPECT_THAT(r->verdict(), HasSubstr("every running rank issued all_reduce #9 (10 float32), so "
                                      "none is missing from it"));
}

TEST(CollectiveReportTest, NothingToReportWhileNoReportingRankIsInACollective) {
  // Rank 1 stopped inside #5 (its report is old); the others are between collectives.
  const std::vector<RankView> ranks = {Rank(0, 4, 4, "forward"), Rank(1, 5, 4, "backward", 9000)};
  EXPECT_FALSE(BuildCollectiveReport(ranks, kSilentAfterMs).has_value());
}

TEST(CollectiveReportTest, RanksAheadOrExitedAreShownButNotBlamed) {
  std::vector<RankView> ranks = {Rank(0, 8, 7), Rank(1, 9, 8, "forward"), Rank(2, 7, 7)};
  ranks[2].status.set_exited(true);
  const std::optional<CollectiveReport> r = BuildCollectiveReport(ranks, kSilentAfterMs);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->seq(), 8);
  EXPECT_EQ(r->rows(1).state(), "ahead");
  EXPECT_EQ(r->rows(1).seq(), 9);
  EXPECT_DOUBLE_EQ(r->rows(1).seconds(), 3.9);  // in #9, since #8 completed
  EXPECT_THAT(r->verdict(), HasSubstr("rank 1 completed it and waits in collective #9 for 3.9 s"));
  EXPECT_EQ(r->rows(2).state(), "exited");
  EXPECT_TRUE(r->missing().empty());
  EXPECT_THAT(r->verdict(), HasSubstr("collective #8"));  // no record names its op
}

TEST(CollectiveReportTest, RanksThatIssuedDifferentCollectivesAreNamed) {
  std::vector<RankView> ranks = {Rank(0, 3, 2), Rank(1, 3, 2)};
  AddRecord(&ranks[0], 3, 100, 2000);
  AddRecord(&ranks[1], 3, 4, 2000, "running", "broadcast");
  const std::optional<CollectiveReport> r = BuildCollectiveReport(ranks, kSilentAfterMs);
  ASSERT_TRUE(r.has_value());
  EXPECT_THAT(r->verdict(), HasSubstr("the ranks disagree on #3: rank 0 all_reduce 100 float32, "
                                      "rank 1 broadcast 4 float32"));
}

TEST(CollectiveReportTest, NamesCollectivesAsTheProcessGroupDoes) {
  EXPECT_EQ(CollectiveName(57, "all_reduce", 262144, "float32"), "all_reduce #57 (262144 float32)");
  EXPECT_EQ(CollectiveName(3, "barrier", 0, ""), "barrier #3");
  EXPECT_EQ(CollectiveName(8, "", 0, ""), "collective #8");
}

}  // namespace
}  // namespace trainyard::server
