#include "worker/nn/linear.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/nn/stats_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using testing::StatsOf;

TEST(LinearTest, InitialisesLikePyTorchInsideOneOverSqrtFanIn) {
  Generator gen(11);
  Linear fc(400, 300, true, &gen);  // seed 11
  const double bound = 1 / std::sqrt(400.0);
  const auto w = StatsOf(fc.weight());
  EXPECT_GE(w.min, -bound);
  EXPECT_LT(w.max, bound);
  EXPECT_LT(w.min, -0.99 * bound);  // fills the interval
  EXPECT_GT(w.max, 0.99 * bound);
  EXPECT_NEAR(w.mean, 0, 0.01 * bound);
  EXPECT_NEAR(w.std, bound / std::sqrt(3.0), 0.01 * bound);  // U(-b, b) has std b / sqrt(3)
  const auto b = StatsOf(fc.bias());
  EXPECT_GE(b.min, -bound);
  EXPECT_LT(b.max, bound);
  EXPECT_GT(b.max - b.min, bound);
}

TEST(LinearTest, HasPyTorchNamesAndShapes) {
  Linear fc(3, 5);
  ASSERT_EQ(fc.StateDict().size(), 2u);
  EXPECT_EQ(fc.StateDict()[0].first, "weight");
  EXPECT_EQ(fc.weight().shape(), (Shape{5, 3}));
  EXPECT_EQ(fc.StateDict()[1].first, "bias");
  EXPECT_EQ(fc.bias().shape(), (Shape{5}));
  Linear no_bias(3, 5, false);
  EXPECT_EQ(no_bias.StateDict().size(), 1u);
  EXPECT_FALSE(no_bias.bias().defined());
}

TEST(LinearTest, ForwardComputesXTimesWeightTransposedPlusBias) {
  Linear fc(FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), FromVector<float>({10, 20}));
  Tensor y = fc.Forward(FromVector<float>({1, 0, -1, 2, 2, 2}, {1, 2, 3}));  // (1, 2, 3)
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(ToVector<float>(y), (std::vector<float>{8, 18, 22, 50}));
}

TEST(LinearTest, TheSameSeedGivesTheSameWeights) {
  Generator a(5), b(5), c(6);
  Linear x(8, 4, true, &a), y(8, 4, true, &b), z(8, 4, true, &c);
  EXPECT_EQ(ToVector<float>(x.weight()), ToVector<float>(y.weight()));
  EXPECT_EQ(ToVector<float>(x.bias()), ToVector<float>(y.bias()));
  EXPECT_NE(ToVector<float>(x.weight()), ToVector<float>(z.weight()));
}

TEST(EmbeddingTest, InitialisesFromAStandardNormal) {
  Generator gen(3);
  Embedding emb(200, 100, &gen);
  EXPECT_EQ(emb.weight().shape(), (Shape{200, 100}));
  const auto s = StatsOf(emb.weight());
  EXPECT_NEAR(s.mean, 0, 0.02);
  EXPECT_NEAR(s.std, 1, 0.02);
}

TEST(EmbeddingTest, ForwardPicksRowsForEachIndex) {
  Generator gen(4);
  Embedding emb(5, 3, &gen);
  Tensor out = emb.Forward(FromVector<int64_t>({4, 0, 4, 2}, {2, 2}));
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  const std::vector<float> w = ToVector<float>(emb.weight()), o = ToVector<float>(out);
  const int64_t rows[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(o[i * 3 + j], w[rows[i] * 3 + j]);
}

}  // namespace
}  // namespace trainyard::nn
