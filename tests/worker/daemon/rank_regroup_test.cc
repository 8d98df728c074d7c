// RankGroup (worker/daemon/rank_regroup.h): regroup lines read from the command pipe, the
// request at a step boundary, the bounded wait of a rank that left its group, and the
// `regrouping` it reports meanwhile.
#include "worker/daemon/rank_regroup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace trainyard::daemon {
namespace {

using namespace std::chrono_literals;

std::string Line(int attempt, int rank, int world, bool at_step_boundary) {
  return R"({"type":"regroup","attempt":)" + std::to_string(attempt) + R"(,"secret":"s)" +
         std::to_string(attempt) + R"(","rank":)" + std::to_string(rank) + R"(,"world_size":)" +
         std::to_string(world) + R"(,"at_step_boundary":)" + (at_step_boundary ? "true" : "false") +
         "}";
}

TEST(RankGroupTest, ARankThatLeftItsGroupGetsTheRegroupFromThePipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  RankGroup g({1, "s1", 2, 3}, fds[0], 10s);
  std::string why;
  EXPECT_FALSE(g.regrouping(&why));
  std::thread daemon([&] {
    std::this_thread::sleep_for(100ms);
    const std::string text = Line(2, 1, 2, false) + "\n";
    ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  });
  std::thread reporter([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(g.regrouping(&why)) << "reported while it waits";
    EXPECT_EQ(why, "connection reset by peer");
  });
  StatusOr<GroupPlace> next = g.Leave(UnavailableError("connection reset by peer"));
  daemon.join();
  reporter.join();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->attempt, 2);
  EXPECT_EQ(next->secret, "s2");
  EXPECT_EQ(next->rank, 1);
  EXPECT_EQ(next->world_size, 2);
  EXPECT_FALSE(*g.requested()) << "not at a step boundary";
  g.Joined(*next, nullptr);
  EXPECT_FALSE(g.regrouping(nullptr));
  EXPECT_EQ(g.place().attempt, 2);
  ::close(fds[1]);
  ::close(fds[0]);
}

TEST(RankGroupTest, ARegroupAtAStepBoundaryIsRequestedAndAnOldOneIgnored) {
  RankGroup g({3, "s3", 0, 2}, -1, 10s);
  g.OnCommand(Line(3, 0, 3, true));  // not later than the current attempt
  EXPECT_FALSE(*g.requested());
  g.OnCommand("not json");
  g.OnCommand(Line(4, 0, 3, true));
  EXPECT_TRUE(*g.requested());
  StatusOr<GroupPlace> next = g.Leave(OkStatus());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->attempt, 4);
  EXPECT_EQ(next->world_size, 3);
  EXPECT_FALSE(*g.requested()) << "cleared once taken";
}

TEST(RankGroupTest, WaitingForARegroupThatNeverComesIsBounded) {
  RankGroup g({1, "s1", 0, 2}, -1, 200ms);
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<GroupPlace> next = g.Leave(UnavailableError("peer gone"));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(next.status().message().find("for the coordinator's regroup"), std::string::npos)
      << next.status().message();
  EXPECT_NE(next.status().message().find("peer gone"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::daemon
