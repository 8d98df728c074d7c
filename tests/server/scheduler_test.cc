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
  WorkerCapacity w;
  w.name = name;
  w.host = name + ".host";
  w.total_slots = total;
  for (int s = total - free; s < total; ++s) w.free_slots.push_back(s);
  return w;
}

WorkerCapacity Idle(const std::string& name, int slots) { return Worker(name, slots, slots); }

GangRequest Gang(const std::string& id, int world_size, int ranks_per_node = 0) {
  GangRequest g;
  g.job_id = id;
  g.world_size = world_size;
  g.ranks_per_node = ranks_per_node;
  return g;
}

constexpr int64_t kGiB = int64_t{1} << 30;

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
  const std::vector<WorkerCapacity> busy = {Worker("a", 0, 2), Worker("b", 1, 2)};
  EXPECT_FALSE(PlaceGang(Gang("j", 4), busy).has_value()) << "one slot is free now";
  EXPECT_TRUE(CheckCanEverFit(Gang("j", 4), busy).ok()) << "four exist";
  EXPECT_EQ(CheckCanEverFit(Gang("j", 5), busy).code(), StatusCode::kFailedPrecondition);
}

TEST(SchedulerTest, CheckCanEverFitSaysWhatTheJobNeedsAndWhatIsRegistered) {
  Status s = CheckCanEverFit(Gang("j", 5), {Idle("a", 2), Idle("b", 2)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "parallelism.world_size = 5 needs 5 CPU slots; the 2 alive workers have 4 CPU "
            "slots in all (lower world_size or add workers)");

  GangRequest gpu = Gang("j", 4, /*ranks_per_node=*/4);
  gpu.gpu = true;
  s = CheckCanEverFit(gpu, {Idle("a", 2), Idle("b", 2)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("needs 4 GPUs, 4 on each of 1 workers"));
  EXPECT_THAT(s.message(), HasSubstr("have 4 GPUs in all"));
}

// A worker takes no more ranks than their estimated memory fits: 10 GiB holds two 4 GiB ranks
// whatever its slots, and memory other jobs' ranks hold is not free.
TEST(SchedulerTest, PlacesNoMoreRanksOnAWorkerThanItsMemoryHolds) {
  GangRequest job = Gang("j", 3);
  job.rank_memory_bytes = 4 * kGiB;
  job.rank_memory = "about 4.0 GiB per rank";
  WorkerCapacity a = Idle("a", 4), b = Idle("b", 4);
  a.memory_bytes = 10 * kGiB;
  b.memory_bytes = 10 * kGiB;
  EXPECT_EQ(RanksThatFit(a, job), 2u);
  auto ranks = PlaceGang(job, {a, b});
  ASSERT_TRUE(ranks.has_value());
  EXPECT_THAT(Where(*ranks), ElementsAre("a:0", "a:1", "b:0"));
  b.memory_in_use_bytes = 8 * kGiB;  // another job's ranks
  EXPECT_FALSE(PlaceGang(job, {a, b}).has_value());
  EXPECT_TRUE(CheckCanEverFit(job, {a, b}).ok()) << "it fits once the other job ends";

  // Unknown memory on either side: slots alone decide.
  WorkerCapacity unknown = Idle("u", 4);
  EXPECT_EQ(RanksThatFit(unknown, job), 4u);
  GangRequest unsized = Gang("k", 3);
  EXPECT_EQ(RanksThatFit(a, unsized), 4u);
}

TEST(SchedulerTest, CheckCanEverFitSaysWhenMemoryIsWhatIsMissing) {
  GangRequest job = Gang("j", 1);
  job.rank_memory_bytes = 64 * kGiB;
  job.rank_memory = "about 64.0 GiB per rank: weights ...";
  WorkerCapacity a = Idle("a", 2);
  a.memory_bytes = 16 * kGiB;
  Status s = CheckCanEverFit(job, {a});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("the job needs about 64.0 GiB per rank: weights ..."));
  EXPECT_THAT(s.message(), HasSubstr("the most any worker has is 16.0 GiB"));

  // A GPU job is held against each GPU's own memory.
  job.gpu = true;
  WorkerCapacity g = Idle("g", 2);
  g.slot_memory_bytes = 80 * kGiB;
  EXPECT_EQ(RanksThatFit(g, job), 2u);
  g.slot_memory_bytes = 40 * kGiB;
  EXPECT_EQ(RanksThatFit(g, job), 0u);
}

}  // namespace
}  // namespace trainyard::server
