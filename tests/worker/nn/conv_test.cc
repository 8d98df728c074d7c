#include "worker/nn/conv.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/nn/stats_util.h"
#include "worker/autograd/grad_mode.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using testing::StatsOf;

TEST(Conv2dTest, InitialisesInsideOneOverSqrtFanInPerGroup) {
  Generator gen(21);
  Conv2d conv(16, 32, 3, 1, 0, 1, /*groups=*/2, true, &gen);
  EXPECT_EQ(conv.weight().shape(), (Shape{32, 8, 3, 3}));
  const double bound = 1 / std::sqrt(8.0 * 9);  // fan_in = in / groups * k * k
  const auto w = StatsOf(conv.weight());
  EXPECT_GE(w.min, -bound);
  EXPECT_LT(w.max, bound);
  EXPECT_NEAR(w.std, bound / std::sqrt(3.0), 0.03 * bound);
  const auto b = StatsOf(conv.bias());
  EXPECT_GE(b.min, -bound);
  EXPECT_LT(b.max, bound);
}

TEST(Conv2dTest, ForwardAppliesStridePaddingAndDilation) {
  Conv2d conv(3, 4, 3, /*stride=*/2, /*padding=*/1, /*dilation=*/1);
  EXPECT_EQ(conv.Forward(Randn({2, 3, 9, 8})).shape(), (Shape{2, 4, 5, 4}));
  Conv2d dilated(3, 4, 3, 1, 0, /*dilation=*/2);
  EXPECT_EQ(dilated.Forward(Randn({3, 9, 9})).shape(), (Shape{4, 5, 5}));
}

TEST(Conv2dTest, WithoutBiasHasOnlyAWeight) {
  Conv2d conv(3, 4, 1, 1, 0, 1, 1, /*bias=*/false);
  ASSERT_EQ(conv.StateDict().size(), 1u);
  EXPECT_EQ(conv.StateDict()[0].first, "weight");
  // A 1x1 convolution with weight 1 on one channel and 0 elsewhere copies that channel.
  NoGradGuard no_grad;
  FillInPlace(conv.weight(), 0);
  conv.weight().data<float>()[1] = 1;  // output 0 reads input channel 1
  Tensor x = Randn({1, 3, 2, 2});
  std::vector<float> y = ToVector<float>(conv.Forward(x)), xv = ToVector<float>(x);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], xv[4 + i]);
}

}  // namespace
}  // namespace trainyard::nn
