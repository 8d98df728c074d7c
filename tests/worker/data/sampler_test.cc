#include "worker/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

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

std::unique_ptr<DistributedSampler> Shard(int64_t n, int rank, int world, bool shuffle = true,
                                          uint64_t seed = 42) {
  StatusOr<std::unique_ptr<DistributedSampler>> s =
      DistributedSampler::Create(n, rank, world, shuffle, seed);
  TY_CHECK(s.ok()) << s.status();
  return std::move(s).value();
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> Slice(const std::vector<int64_t>& v, int64_t begin, int64_t end) {
  end = std::min<int64_t>(end, static_cast<int64_t>(v.size()));
  return std::vector<int64_t>(v.begin() + std::min<int64_t>(begin, end), v.begin() + end);
}

TEST(DistributedSamplerTest, ShardsAreDisjointAndCoverTheDatasetWhenWorldSizeDividesIt) {
  for (bool shuffle : {true, false}) {
    std::vector<int64_t> all;
    for (int r = 0; r < 4; ++r) {
      auto s = Shard(120, r, 4, shuffle);
      EXPECT_EQ(s->size(), 30);
      EXPECT_EQ(s->dataset_size(), 120);
      std::vector<int64_t> mine = s->Indices(3);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    EXPECT_TRUE(IsPermutation(all, 120)) << "shuffle " << shuffle;
  }
}

TEST(DistributedSamplerTest, PadsByRepeatingTheStartOfTheOrder) {
  // n = 10, W = 4: 12 global positions; positions 10 and 11 repeat positions 0 and 1.
  const std::vector<int64_t> global = RandomPermutation(10, 42, 0);
  EXPECT_EQ(Shard(10, 2, 4)->Indices(0), (std::vector<int64_t>{global[2], global[6], global[0]}));
  EXPECT_EQ(Shard(10, 3, 4)->Indices(0), (std::vector<int64_t>{global[3], global[7], global[1]}));
  EXPECT_EQ(Shard(10, 2, 4, false)->Indices(0), (std::vector<int64_t>{2, 6, 0}));
  // Fewer samples than ranks: the order repeats as often as needed.
  for (int r = 0; r < 5; ++r) EXPECT_EQ(Shard(2, r, 5, false)->Indices(0)[0], r % 2) << r;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(Shard(1, r, 3)->Indices(7), std::vector<int64_t>{0});
  // Every sample appears, and only the W - 1 padded ones twice.
  std::map<int64_t, int> seen;
  for (int r = 0; r < 4; ++r)
    for (int64_t i : Shard(10, r, 4)->Indices(0)) ++seen[i];
  ASSERT_EQ(seen.size(), 10u);
  for (const auto& [i, count] : seen)
    EXPECT_EQ(count, i == global[0] || i == global[1] ? 2 : 1) << i;
}

TEST(DistributedSamplerTest, EveryRankHasCeilNOverWSamples) {
  for (int64_t n = 1; n <= 20; ++n) {
    for (int w = 1; w <= 6; ++w) {
      for (int r = 0; r < w; ++r) {
        auto s = Shard(n, r, w);
        EXPECT_EQ(s->size(), (n + w - 1) / w) << n << " " << w;
        EXPECT_EQ(static_cast<int64_t>(s->Indices(1).size()), s->size()) << n << " " << w;
      }
    }
  }
}

TEST(DistributedSamplerTest, OrderDependsOnlyOnSeedAndEpoch) {
  auto a = Shard(100, 1, 3, true, 7), b = Shard(100, 1, 3, true, 7);
  auto other_seed = Shard(100, 1, 3, true, 8);
  b->Indices(0);
  b->Indices(9);
  EXPECT_EQ(a->Indices(4), b->Indices(4));
  EXPECT_NE(a->Indices(0), a->Indices(1));
  EXPECT_NE(a->Indices(0), other_seed->Indices(0));
  EXPECT_EQ(Shard(100, 1, 3, false)->Indices(0), Shard(100, 1, 3, false)->Indices(5));
}

// Note [Strided shards]: W ranks with batch b see, at every step, exactly what one process
// with batch W b sees.
TEST(DistributedSamplerTest, StridedBatchesUniteToTheSingleProcessBatch) {
  const int64_t n = 96, b = 5;  // 24 per rank; the last step is short
  const int w = 4;
  const RandomSampler single_random(n, 42);
  const SequentialSampler single_sequential(n);
  for (bool shuffle : {true, false}) {
    const Sampler& single =
        shuffle ? static_cast<const Sampler&>(single_random) : single_sequential;
    for (uint64_t epoch : {0, 5}) {
      const std::vector<int64_t> whole = single.Indices(epoch);
      std::vector<std::vector<int64_t>> ranks;
      for (int r = 0; r < w; ++r) ranks.push_back(Shard(n, r, w, shuffle)->Indices(epoch));
      for (int64_t step = 0; step * w * b < n; ++step) {
        std::vector<int64_t> united;
        for (const auto& mine : ranks) {
          std::vector<int64_t> batch = Slice(mine, step * b, (step + 1) * b);
          united.insert(united.end(), batch.begin(), batch.end());
        }
        EXPECT_EQ(Sorted(united), Sorted(Slice(whole, step * w * b, (step + 1) * w * b)))
            << "shuffle " << shuffle << " epoch " << epoch << " step " << step;
      }
    }
  }
}

TEST(DistributedSamplerTest, ResumingAtAPositionGivesTheTailOfTheEpoch) {
  const int64_t n = 97;
  const int w = 3;
  for (int r = 0; r < w; ++r) {
    auto s = Shard(n, r, w);
    const std::vector<int64_t> full = s->Indices(2);
    for (int64_t start : {0, 1, 17, 32, 33}) {
      EXPECT_EQ(s->Indices(2, start), Slice(full, start, s->size())) << r << " " << start;
    }
  }
  // Every rank resumed at p: the single process resumed at p W.
  const std::vector<int64_t> whole = RandomSampler(96, 42).Indices(2);
  std::vector<int64_t> united;
  for (int r = 0; r < w; ++r) {
    std::vector<int64_t> tail = Shard(96, r, w)->Indices(2, 10);
    united.insert(united.end(), tail.begin(), tail.end());
  }
  EXPECT_EQ(Sorted(united), Sorted(Slice(whole, 10 * w, 96)));
}

TEST(DistributedSamplerTest, BadArgumentsAreClearErrors) {
  const std::pair<StatusOr<std::unique_ptr<DistributedSampler>>, const char*> cases[] = {
      {DistributedSampler::Create(10, 0, 0, true, 1), "world_size is 0; it must be at least 1"},
      {DistributedSampler::Create(10, -1, 2, true, 1), "rank -1 is outside [0, 2)"},
      {DistributedSampler::Create(10, 2, 2, true, 1), "rank 2 is outside [0, 2)"},
      {DistributedSampler::Create(0, 0, 2, false, 1), "the dataset has 0 samples"},
  };
  for (const auto& [result, message] : cases) {
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << message;
    EXPECT_NE(result.status().message().find(message), std::string::npos) << result.status();
  }
}

TEST(SamplerTest, WholeDatasetSamplersPointIntoADatasetOfTheirSize) {
  EXPECT_EQ(SequentialSampler(7).dataset_size(), 7);
  EXPECT_EQ(RandomSampler(9, 1).dataset_size(), 9);
}

}  // namespace
}  // namespace trainyard::data
