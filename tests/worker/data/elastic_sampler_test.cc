#include "worker/data/elastic_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace trainyard::data {
namespace {

std::unique_ptr<ElasticSampler> Make(int64_t n, int64_t batch, int64_t micro, int rank, int world,
                                     bool shuffle = true) {
  auto s = ElasticSampler::Create(n, batch, micro, rank, world, shuffle, /*seed=*/7);
  TY_CHECK(s.ok()) << s.status();
  return *std::move(s);
}

// The samples every rank of `world` takes in step s (of epoch 0), as a sorted list.
std::vector<int64_t> StepSamples(int64_t n, int64_t batch, int64_t micro, int world, int64_t s) {
  std::vector<int64_t> all;
  for (int r = 0; r < world; ++r) {
    auto sampler = Make(n, batch, micro, r, world);
    const std::vector<int64_t> order = sampler->Indices(0);
    const int64_t per_step = sampler->rank_micro_batches() * batch;
    all.insert(all.end(), order.begin() + s * per_step, order.begin() + (s + 1) * per_step);
  }
  std::sort(all.begin(), all.end());
  return all;
}

TEST(ElasticSamplerTest, AStepTakesTheSameSamplesAtEveryWorldSize) {
  // 6 micro-batches of 4 per step: 1, 2, 3 or 6 ranks share them (4 and 5 unevenly).
  for (int64_t s = 0; s < 4; ++s) {
    const std::vector<int64_t> one = StepSamples(100, 4, 6, 1, s);
    ASSERT_EQ(one.size(), 24u);
    for (int world = 2; world <= 6; ++world) {
      EXPECT_EQ(StepSamples(100, 4, 6, world, s), one) << "world " << world << " step " << s;
    }
  }
}

TEST(ElasticSamplerTest, AMembershipChangeAtAStepBoundaryNeitherSkipsNorRepeats) {
  // 3 ranks for 2 steps, then 2 ranks from the position of step 2: every sample of the epoch's
  // 4 steps exactly once.
  std::multiset<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    auto s = Make(50, 2, 6, r, 3);
    const std::vector<int64_t> order = s->Indices(0);
    seen.insert(order.begin(), order.begin() + s->PositionOfStep(2));
  }
  for (int r = 0; r < 2; ++r) {
    auto s = Make(50, 2, 6, r, 2);
    const std::vector<int64_t> order = s->Indices(0, s->PositionOfStep(2));
    seen.insert(order.begin(), order.end());
  }
  EXPECT_EQ(seen.size(), 48u);  // 4 steps x 12; the last 2 of 50 are left out
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 48u) << "a sample repeated";
}

TEST(ElasticSamplerTest, UnevenSharesGiveLowRanksOneMoreMicroBatch) {
  EXPECT_EQ(Make(100, 4, 3, 0, 2)->rank_micro_batches(), 2);
  EXPECT_EQ(Make(100, 4, 3, 1, 2)->rank_micro_batches(), 1);
  EXPECT_EQ(Make(100, 4, 3, 1, 2)->MicroBatchIndex(0), 1);
  EXPECT_EQ(Make(100, 4, 3, 0, 2)->MicroBatchIndex(1), 2);
  EXPECT_EQ(Make(100, 4, 3, 0, 2)->steps_per_epoch(), 8);  // 100 / 12
}

TEST(ElasticSamplerTest, RejectsMoreRanksThanMicroBatches) {
  auto s = ElasticSampler::Create(100, 4, 2, 0, 3, true, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("rank 0 of 3"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace trainyard::data
