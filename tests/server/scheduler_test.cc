#include "server/scheduler.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using trainyard::v1::RankPlacement;

// A worker with `free` of its `total` slots free (the lowest ones in use).
WorkerCapacity Worker(const std::string& name, int free, int total) {
  WorkerCapacity w{name, name + ".host", {}, total};
  for (int s = total - free; s < total; ++s) w.free_slots.push_back(s);
  return w;
}

WorkerCapacity Idle(const std::string& name, int slots) { return Worker(name, slots, slots); }

GangRequest Gang(const std::string& id, int world_size, int ranks_per_node = 0) {
  return {id, world_size, ranks_per_node, /*gpu=*/false};
}

// "worker:slot" of each rank, in rank order.
std::vector<std::string> Where(const std::vector<RankPlacement>& ranks) {
  std::vector<std::string> out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    EXPECT_EQ(ranks[i].rank(), static_cast<int>(i));
    out.push_back(ranks[i].worker() + ":" + std::to_string(ranks[i].slot()));
  }
  return out;
}

TEST(SchedulerTest, PlacesAllRanksOrNone) {
  // 3 free slots for 4 ranks: nothing is placed, not 3 of them.
  EXPECT_FALSE(PlaceGang(Gang("j", 4), {Idle("a", 2), Worker("b", 1, 2)}).has_value());

  auto ranks = PlaceGang(Gang("j", 4), {Idle("a", 2), Idle("b", 2)});
  ASSERT_TRUE(ranks.has_value());
  EXPECT_THAT(Where(*ranks), ElementsAre("a:0", "a:1", "b:0", "b:1"));
  EXPECT_EQ((*ranks)[2].host(), "b.host");
}

TEST(SchedulerTest, PacksOntoTheFewestWorkers) {
  const std::vector<WorkerCapacity> workers = {Idle("a", 2), Idle("b", 4), Idle("c", 1)};

  auto four = PlaceGang(Gang("j", 4), workers);
  ASSERT_TRUE(four.has_value());
  EXPECT_THAT(Where(*four), ElementsAre("b:0", "b:1", "b:2", "b:3"));

  // Most free slots first; the ranks on one worker are consecutive.
  auto five = PlaceGang(Gang("j", 5), workers);
  ASSERT_TRUE(five.has_value());
  EXPECT_THAT(Where(*five), ElementsAre("b:0", "b:1", "b:2", "b:3", "a:0"));
}

TEST(SchedulerTest, BreaksTiesBetweenEquallyFreeWorkersByName) {
  auto ranks = PlaceGang(Gang("j", 2), {Idle("c", 1), Idle("a", 1), Idle("b", 1)});
  ASSERT_TRUE(ranks.has_value());
  EXPECT_THAT(Where(*ranks), ElementsAre("a:0", "b:0"));
}

TEST(SchedulerTest, UsesOnlyFreeSlots) {
  auto ranks = PlaceGang(Gang("j", 2), {Worker("a", 2, 4)});
  ASSERT_TRUE(ranks.has_value());
  EXPECT_THAT(Where(*ranks), ElementsAre("a:2", "a:3"));
}

TEST(SchedulerTest, PutsRanksPerNodeRanksOnEachOfWorldSizeOverRanksPerNodeWorkers) {
  const std::vector<WorkerCapacity> workers = {Idle("a", 4), Idle("b", 2), Idle("c", 1)};
  // Packing alone would put all 4 ranks on a.
  auto ranks = PlaceGang(Gang("j", 4, /*ranks_per_node=*/2), workers);
  ASSERT_TRUE(ranks.has_value());
  EXPECT_THAT(Where(*ranks), ElementsAre("a:0", "a:1", "b:0", "b:1"));

  // Only a has 2 free slots for the second pair: c's one slot does not count.
  EXPECT_FALSE(PlaceGang(Gang("j", 4, 2), {Idle("a", 4), Idle("c", 1)}).has_value());
}

TEST(SchedulerTest, ScheduleIsStrictFifoSoTheHeadOfTheQueueBlocksSmallerJobs) {
  std::vector<WorkerCapacity> workers = {Idle("a", 3)};
  // "big" needs 4 of the 3 free slots; "small" would fit but must not overtake it.
  std::vector<Placement> placed = Schedule({Gang("big", 4), Gang("small", 1)}, &workers);
  EXPECT_TRUE(placed.empty());
  EXPECT_EQ(workers[0].free_slots.size(), 3u);

  // Jobs before the blocked head are placed; those after it wait.
  placed = Schedule({Gang("first", 1), Gang("big", 4), Gang("small", 1)}, &workers);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "first");
}

TEST(SchedulerTest, ScheduleTakesTheSlotsItHandsOut) {
  std::vector<WorkerCapacity> workers = {Idle("a", 4)};
  std::vector<Placement> placed = Schedule({Gang("x", 2), Gang("y", 2), Gang("z", 1)}, &workers);
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_EQ(placed[0].job_id, "x");
  EXPECT_THAT(Where(placed[0].ranks), ElementsAre("a:0", "a:1"));
  EXPECT_EQ(placed[1].job_id, "y");
  EXPECT_THAT(Where(placed[1].ranks), ElementsAre("a:2", "a:3"));
  EXPECT_TRUE(workers[0].free_slots.empty());
}

TEST(SchedulerTest, CheckCanEverFitCountsBusySlotsAsFree) {
  EXPECT_TRUE(CheckCanEverFit(Gang("j", 4), {Worker("a", 0, 2), Worker("b", 1, 2)}).ok());
}

TEST(SchedulerTest, CheckCanEverFitSaysWhatTheJobNeedsAndWhatIsRegistered) {
  Status s = CheckCanEverFit(Gang("j", 5), {Idle("a", 2), Idle("b", 2)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "parallelism.world_size = 5 needs 5 CPU slots; the 2 alive workers have 4 CPU "
            "slots in all (lower world_size or add workers)");

  GangRequest gpu{"j", 4, /*ranks_per_node=*/4, /*gpu=*/true};
  s = CheckCanEverFit(gpu, {Idle("a", 2), Idle("b", 2)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("needs 4 GPUs, 4 on each of 1 workers"));
  EXPECT_THAT(s.message(), HasSubstr("have 4 GPUs in all"));
}

}  // namespace
}  // namespace trainyard::server
