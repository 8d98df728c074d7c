#include "worker/nn/init.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/nn/stats_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn::init {
namespace {

using testing::StatsOf;

TEST(InitTest, FansCountTheReceptiveField) {
  const Fans conv = ComputeFans(Empty({8, 3, 5, 5}));
  EXPECT_EQ(conv.in, 3 * 25);
  EXPECT_EQ(conv.out, 8 * 25);
  const Fans linear = ComputeFans(Empty({10, 4}));
  EXPECT_EQ(linear.in, 4);
  EXPECT_EQ(linear.out, 10);
}

TEST(InitTest, KaimingNormalFanOutHasStdSqrtTwoOverFanOut) {
  Generator gen(2);
  Tensor w = Empty({64, 32, 3, 3});
  KaimingNormal(w, FanMode::kFanOut, &gen);
  EXPECT_NEAR(StatsOf(w).std, std::sqrt(2.0 / (64 * 9)), 0.01 * std::sqrt(2.0 / (64 * 9)));
  KaimingNormal(w, FanMode::kFanIn, &gen);
  EXPECT_NEAR(StatsOf(w).std, std::sqrt(2.0 / (32 * 9)), 0.01 * std::sqrt(2.0 / (32 * 9)));
}

TEST(InitTest, KaimingUniformBoundFollowsTheLeakyReluGain) {
  Generator gen(3);
  Tensor w = Empty({100, 50});
  KaimingUniform(w, 0, &gen);  // gain sqrt(2): bound sqrt(6 / fan_in)
  const auto s = StatsOf(w);
  const double bound = std::sqrt(6.0 / 50);
  EXPECT_GE(s.min, -bound);
  EXPECT_LT(s.max, bound);
  EXPECT_GT(s.max, 0.99 * bound);
}

TEST(InitTest, ConstantFillsEvenTensorsThatRequireGrad) {
  Tensor w = Empty({3}).set_requires_grad(true);
  Ones(w);
  EXPECT_EQ(ToVector<float>(w), std::vector<float>(3, 1.0f));
  Zeros(w);
  EXPECT_EQ(ToVector<float>(w), std::vector<float>(3, 0.0f));
}

}  // namespace
}  // namespace trainyard::nn::init
