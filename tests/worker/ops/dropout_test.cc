#include "worker/ops/dropout.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/random.h"
#include "tests/testing/gradcheck.h"
#include "worker/autograd/node.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

TEST(DropoutTest, SameGeneratorStateGivesTheSameMask) {
  Tensor x = Ones({40, 50});
  Generator a(42), b(42), c(43);
  std::vector<float> ya = ToVector<float>(Dropout(x, 0.5, true, &a));
  EXPECT_EQ(ya, ToVector<float>(Dropout(x, 0.5, true, &b)));
  EXPECT_NE(ya, ToVector<float>(Dropout(x, 0.5, true, &c)));
  // A draw advances the generator: the next mask differs.
  EXPECT_NE(ya, ToVector<float>(Dropout(x, 0.5, true, &a)));
  EXPECT_EQ(a.offset(), b.offset() + kernels::cpu::CountersFor(x.numel()));
}

TEST(DropoutTest, KeepsAboutOneMinusPAndScalesTheKeptValues) {
  Tensor x = Full({200, 500}, 3.0);
  Generator gen(7);
  std::vector<float> y = ToVector<float>(Dropout(x, 0.3, true, &gen));
  int64_t kept = 0;
  for (float v : y) {
    if (v != 0) {
      ++kept;
      EXPECT_FLOAT_EQ(v, 3.0f / 0.7f);
    }
  }
  const double rate = static_cast<double>(kept) / static_cast<double>(y.size());
  EXPECT_NEAR(rate, 0.7, 0.01);
}

TEST(DropoutTest, EvalModeOrZeroProbabilityReturnsTheInput) {
  Tensor x = Ones({3, 4});
  EXPECT_EQ(Dropout(x, 0.5, /*training=*/false).impl(), x.impl());
  EXPECT_EQ(Dropout(x, 0.0, /*training=*/true).impl(), x.impl());
}

TEST(DropoutTest, ProbabilityOneGivesZeros) {
  Tensor x = Full({3, 4}, 2.0, TensorOptions().set_requires_grad(true));
  Tensor y = Dropout(x, 1.0, true);
  EXPECT_EQ(ToVector<float>(y), std::vector<float>(12, 0.0f));
  ASSERT_TRUE(autograd::Backward(Sum(y)).ok());
  EXPECT_EQ(ToVector<float>(x.grad()), std::vector<float>(12, 0.0f));
}

TEST(DropoutTest, GradientIsTheMaskTimesTheScale) {
  Tensor x = Ones({20, 30}, TensorOptions().set_requires_grad(true));
  Generator gen(3);
  Tensor y = Dropout(x, 0.4, true, &gen);
  EXPECT_STREQ(y.grad_fn()->name(), "NativeDropoutBackward0");
  ASSERT_TRUE(autograd::Backward(Sum(y)).ok());
  // With x = 1 the output is itself mask * scale.
  EXPECT_EQ(ToVector<float>(x.grad()), ToVector<float>(y));
}

TEST(DropoutGradTest, MatchesFiniteDifferencesForAFixedMaskOnAStridedInput) {
  Generator init(4);
  Tensor x = RandLeaf({5, 7}, &init);
  // A fresh generator per call keeps the mask fixed across the finite-difference evaluations.
  EXPECT_GRADCHECK(
      [](auto& in) {
        Generator gen(11);
        return Dropout(Transpose(in[0], 0, 1), 0.3, true, &gen);
      },
      {x});
}

TEST(DropoutDeathTest, ProbabilityOutsideZeroOneIsAnError) {
  EXPECT_DEATH(Dropout(Ones({2}), 1.5, true), "dropout: probability 1.5 must lie in \\[0, 1\\]");
}

}  // namespace
}  // namespace trainyard::ops
