#include "worker/nn/norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/nn/golden_util.h"
#include "worker/autograd/grad_mode.h"
#include "worker/ops/reduction.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using testing::Names;

TEST(BatchNorm2dTest, HasPyTorchParametersAndBuffers) {
  BatchNorm2d bn(3);
  EXPECT_EQ(Names(bn.StateDict()),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}));
  EXPECT_EQ(Names(bn.NamedParameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(ToVector<float>(bn.weight()), std::vector<float>(3, 1.0f));
  EXPECT_EQ(ToVector<float>(bn.bias()), std::vector<float>(3, 0.0f));
  EXPECT_EQ(ToVector<float>(bn.running_var()), std::vector<float>(3, 1.0f));
  EXPECT_EQ(bn.StateDict()[4].second.dtype(), DType::kInt64);
  EXPECT_EQ(bn.StateDict()[4].second.dim(), 0);
}

TEST(BatchNorm2dTest, TrainingUpdatesRunningStatsAndCountsBatches) {
  BatchNorm2d bn(1, 1e-5, /*momentum=*/0.25);
  // One channel holding 1, 2, 3, 6: mean 3, unbiased variance 14 / 3.
  Tensor x = FromVector<float>({1, 2, 3, 6}, {2, 1, 1, 2});
  Tensor y = bn.Forward(x);
  EXPECT_NEAR(ops::Mean(y).item(), 0, 1e-6);
  EXPECT_FLOAT_EQ(bn.running_mean().item(), 0.25f * 3);
  EXPECT_FLOAT_EQ(bn.running_var().item(), 0.75f + 0.25f * 14 / 3);
  EXPECT_EQ(bn.num_batches_tracked(), 1);
  bn.Forward(x);
  EXPECT_EQ(bn.num_batches_tracked(), 2);
}

TEST(BatchNorm2dTest, EvalNormalisesByRunningStatsAndChangesNothing) {
  BatchNorm2d bn(1);
  {
    NoGradGuard no_grad;
    FillInPlace(bn.running_mean(), 2);
    FillInPlace(bn.running_var(), 4);
  }
  bn.Eval();
  Tensor y = bn.Forward(FromVector<float>({2, 4, 6, 8}, {1, 1, 2, 2}));
  const std::vector<float> v = ToVector<float>(y);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[i], (2 * i + 2 - 2) / std::sqrt(4 + 1e-5), 1e-5);
  EXPECT_FLOAT_EQ(bn.running_mean().item(), 2);
  EXPECT_FLOAT_EQ(bn.running_var().item(), 4);
  EXPECT_EQ(bn.num_batches_tracked(), 0);
}

TEST(BatchNorm2dDeathTest, TrainingNeedsMoreThanOneValuePerChannel) {
  BatchNorm2d bn(2);
  EXPECT_DEATH(bn.Forward(Ones({1, 2, 1, 1})), "more than 1 value per channel");
}

TEST(LayerNormTest, NormalisesTheTrailingDimsWithAffineParameters) {
  LayerNorm ln({4});
  EXPECT_EQ(Names(ln.StateDict()), (std::vector<std::string>{"weight", "bias"}));
  {
    NoGradGuard no_grad;
    FillInPlace(ln.weight(), 2);
    FillInPlace(ln.bias(), 1);
  }
  Tensor y = ln.Forward(FromVector<float>({1, 2, 3, 4, 5, 5, 5, 5}, {2, 4}));
  const std::vector<float> v = ToVector<float>(y);
  const double sd = std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(v[0], 2 * (-1.5 / sd) + 1, 1e-5);
  EXPECT_NEAR(v[3], 2 * (1.5 / sd) + 1, 1e-5);
  EXPECT_NEAR(v[5], 1, 1e-5);  // a constant row becomes the bias
}

TEST(LayerNormTest, BiasFalseDropsTheBiasAsInNanoGpt) {
  LayerNorm ln({3}, 1e-5, true, /*bias=*/false);
  EXPECT_EQ(Names(ln.StateDict()), (std::vector<std::string>{"weight"}));
  LayerNorm plain({3}, 1e-5, /*elementwise_affine=*/false);
  EXPECT_TRUE(plain.StateDict().empty());
  EXPECT_EQ(plain.Forward(Randn({2, 3})).shape(), (Shape{2, 3}));
}

}  // namespace
}  // namespace trainyard::nn
