#include "worker/ops/reduction.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/gradcheck.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

TEST(ReductionGradTest, SumMeanVarOverDimsWithKeepdim) {
  Generator gen(11);
  Tensor x = RandLeaf({3, 4, 5}, &gen);
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep);
    EXPECT_GRADCHECK([&](auto& in) { return Sum(in[0], {1}, keep); }, {x});
    EXPECT_GRADCHECK([&](auto& in) { return Sum(in[0], {0, 2}, keep); }, {x});
    EXPECT_GRADCHECK([&](auto& in) { return Mean(in[0], {-1}, keep); }, {x});
    EXPECT_GRADCHECK([&](auto& in) { return Mean(in[0], {0, 1}, keep); }, {x});
    EXPECT_GRADCHECK([&](auto& in) { return Var(in[0], {1}, 1, keep); }, {x});
    EXPECT_GRADCHECK([&](auto& in) { return Var(in[0], {0, 2}, 0, keep); }, {x});
  }
  EXPECT_GRADCHECK([](auto& in) { return Sum(in[0]); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Mean(in[0]); }, {x});
}

TEST(ReductionGradTest, ReductionsOfNonContiguousInputs) {
  Generator gen(12);
  Tensor x = RandLeaf({4, 6}, &gen);
  auto t = [](const Tensor& v) { return Slice(Transpose(v, 0, 1), 0, 1, 6, 2); };  // (3, 4)
  EXPECT_GRADCHECK([&](auto& in) { return Sum(t(in[0]), {0}); }, {x});
  EXPECT_GRADCHECK([&](auto& in) { return Var(t(in[0]), {1}); }, {x});
  EXPECT_GRADCHECK([&](auto& in) { return Max(t(in[0]), 1).first; }, {x});
}

TEST(ReductionGradTest, MaxAndMinAlongADimRouteToTheArgIndex) {
  Generator gen(13);
  Tensor x = RandLeaf({3, 5, 2}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Max(in[0], 1).first; }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Min(in[0], -1, true).first; }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Max(in[0]); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Min(in[0]); }, {x});
}

TEST(ReductionTest, ValuesAndIndices) {
  Tensor x = FromVector<float>({1, 5, 3, 7, 2, 0}, {2, 3});
  EXPECT_EQ(ToVector<float>(Sum(x, {1})), (std::vector<float>{9, 9}));
  EXPECT_EQ(ToVector<float>(Mean(x, {0})), (std::vector<float>{4, 3.5, 1.5}));
  EXPECT_EQ(Sum(x, {1}, true).shape(), (Shape{2, 1}));
  auto [v, i] = Max(x, 1);
  EXPECT_EQ(ToVector<float>(v), (std::vector<float>{5, 7}));
  EXPECT_EQ(ToVector<int64_t>(i), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ToVector<int64_t>(Argmax(x, 0)), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(Argmax(x).item(), 3);
  EXPECT_EQ(ToVector<float>(Var(x, {1})), (std::vector<float>{4, 13}));
  EXPECT_EQ(Max(x).item(), 7);
  EXPECT_EQ(Min(x).item(), 0);
}

TEST(ReductionTest, FullMaxSplitsTheGradientAmongTies) {
  Tensor x = FromVector<float>({3, 1, 3});
  x.set_requires_grad(true);
  ASSERT_TRUE(autograd::Backward(Max(x)).ok());
  EXPECT_EQ(ToVector<float>(x.grad()), (std::vector<float>{0.5, 0, 0.5}));
}

TEST(ReductionTest, FullMaxOfANanSendsTheGradientToTheNan) {
  Tensor x = FromVector<float>({3, NAN, 1});
  x.set_requires_grad(true);
  ASSERT_TRUE(autograd::Backward(Max(x)).ok());
  EXPECT_EQ(ToVector<float>(x.grad()), (std::vector<float>{0, 1, 0}));
}

TEST(ReductionTest, LongRowSumsAreAccurate) {
  // 1M values of 0.1: a single running float sum would drift by about 1%.
  Tensor x = Full({1 << 20}, 0.1);
  EXPECT_NEAR(Sum(x).item(), 0.1 * (1 << 20), 0.1 * (1 << 20) * 1e-5);
}

}  // namespace
}  // namespace trainyard::ops
