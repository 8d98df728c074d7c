#include "worker/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

namespace trainyard::data {
namespace {

bool IsPermutation(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] != i) return false;
  }
  return true;
}

TEST(SamplerTest, SequentialSamplerVisitsInOrderEveryEpoch) {
  SequentialSampler s(5);
  EXPECT_EQ(s.Indices(0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.Indices(7, 3), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(s.Indices(0, 5).empty());
}

TEST(SamplerTest, RandomSamplerGivesAPermutationEachEpoch) {
  RandomSampler s(1000, 42);
  for (uint64_t epoch : {0, 1, 99}) EXPECT_TRUE(IsPermutation(s.Indices(epoch), 1000)) << epoch;
  EXPECT_TRUE(RandomSampler(0, 1).Indices(0).empty());
  EXPECT_EQ(RandomSampler(1, 1).Indices(0), std::vector<int64_t>{0});
}

TEST(SamplerTest, OrderDependsOnlyOnSeedAndEpoch) {
  RandomSampler a(500, 7), b(500, 7), other_seed(500, 8);
  // Asking for other epochs first must not change what epoch 3 looks like.
  b.Indices(0);
  b.Indices(10);
  EXPECT_EQ(a.Indices(3), b.Indices(3));
  EXPECT_NE(a.Indices(0), a.Indices(1));
  EXPECT_NE(a.Indices(0), other_seed.Indices(0));
  std::vector<int64_t> identity(500);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_NE(a.Indices(0), identity);
}

TEST(SamplerTest, PermutationsArePinnedSoEveryMachineAgrees) {
  // Fixed by Note [Permutation stream] (values from an independent Python transcription of it);
  // a change here breaks resuming old checkpoints.
  EXPECT_EQ(RandomPermutation(10, 42, 0), (std::vector<int64_t>{5, 8, 1, 2, 9, 4, 3, 7, 0, 6}));
  EXPECT_EQ(RandomPermutation(10, 42, 1), (std::vector<int64_t>{5, 7, 3, 6, 9, 0, 4, 8, 1, 2}));
}

TEST(SamplerTest, ResumingMidEpochGivesTheTailOfTheFullEpoch) {
  RandomSampler s(97, 123);
  const std::vector<int64_t> full = s.Indices(5);
  for (int64_t start : {0, 1, 40, 96, 97}) {
    EXPECT_EQ(s.Indices(5, start), std::vector<int64_t>(full.begin() + start, full.end())) << start;
  }
}

TEST(SamplerTest, AllOrdersOfThreeItemsAreRoughlyEquallyLikely) {
  RandomSampler s(3, 2024);
  std::map<std::vector<int64_t>, int> counts;
  const int epochs = 6000;
  for (int e = 0; e < epochs; ++e) ++counts[s.Indices(e)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) {
    EXPECT_NEAR(count, epochs / 6, 150) << order[0] << order[1] << order[2];
  }
}

TEST(SplitTest, SplitIndicesPartitionsDeterministically) {
  StatusOr<IndexSplit> s = SplitIndices(100, 0.2, 9);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->eval.size(), 20u);
  EXPECT_EQ(s->train.size(), 80u);
  EXPECT_TRUE(std::is_sorted(s->eval.begin(), s->eval.end()));
  EXPECT_TRUE(std::is_sorted(s->train.begin(), s->train.end()));
  std::vector<int64_t> all = s->train;
  all.insert(all.end(), s->eval.begin(), s->eval.end());
  EXPECT_TRUE(IsPermutation(all, 100));
  EXPECT_EQ(SplitIndices(100, 0.2, 9)->eval, s->eval);
  EXPECT_NE(SplitIndices(100, 0.2, 10)->eval, s->eval);
  // Not simply the first or last 20.
  EXPECT_NE(s->eval.back(), 19);
  EXPECT_NE(s->eval.front(), 80);
}

TEST(SplitTest, FractionsOutsideZeroToOneAreRejected) {
  EXPECT_EQ(SplitIndices(10, 1.0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitIndices(10, -0.5, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(SplitIndices(10, 0.0, 0)->eval.empty());
}

}  // namespace
}  // namespace trainyard::data
