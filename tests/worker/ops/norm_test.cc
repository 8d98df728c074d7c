#include "worker/ops/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/node.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

// x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25, unbiased 5/3.
const std::vector<double> kNormalized = {-1.3416354199689269, -0.447211806656309, 0.447211806656309,
                                         1.3416354199689269};

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(LayerNormTest, NormalizesEachRowByItsMeanAndBiasedVariance) {
  Tensor x = FromVector<double>({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4});
  std::vector<double> want = kNormalized;
  want.insert(want.end(), kNormalized.begin(), kNormalized.end());
  ExpectNear(ToVector<double>(LayerNorm(x, {4})), want, 1e-12);
}

TEST(LayerNormTest, WeightAndBiasScaleAndShiftEachFeature) {
  Tensor x = FromVector<double>({1, 2, 3, 4}, {1, 2, 2});
  Tensor w = FromVector<double>({1, 2, 3, 4}, {2, 2}),
         b = FromVector<double>({0, 1, 0, -1}, {2, 2});
  std::vector<double> want(4);
  for (int i = 0; i < 4; ++i) want[i] = kNormalized[i] * (i + 1) + (i == 1 ? 1 : i == 3 ? -1 : 0);
  ExpectNear(ToVector<double>(LayerNorm(x, {2, 2}, w, b)), want, 1e-12);
}

TEST(LayerNormTest, FloatLongRowsMatchDouble) {
  Generator gen(1);
  Tensor x = Normal({3, 1000}, 5.0, 3.0, Options(DType::kFloat64), &gen);
  std::vector<double> ref = ToVector<double>(LayerNorm(x, {1000}));
  std::vector<double> got = ToVector<double>(LayerNorm(To(x, DType::kFloat32), {1000}));
  ExpectNear(got, ref, 2e-5);
}

TEST(LayerNormTest, IsRecordedAsNativeLayerNorm) {
  Tensor x = Ones({2, 3}, TensorOptions().set_requires_grad(true));
  EXPECT_STREQ(LayerNorm(x, {3}).grad_fn()->name(), "NativeLayerNormBackward0");
}

TEST(LayerNormGradTest, InputWeightAndBiasOverOneAndTwoTrailingDims) {
  Generator gen(2);
  Tensor x = RandLeaf({3, 5, 7}, &gen, -2, 2);
  Tensor w = RandLeaf({7}, &gen), b = RandLeaf({7}, &gen);
  Tensor w2 = RandLeaf({5, 7}, &gen), b2 = RandLeaf({5, 7}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return LayerNorm(in[0], {7}, in[1], in[2]); }, {x, w, b});
  EXPECT_GRADCHECK([](auto& in) { return LayerNorm(in[0], {5, 7}, in[1], in[2]); }, {x, w2, b2});
  EXPECT_GRADCHECK([](auto& in) { return LayerNorm(in[0], {7}); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return LayerNorm(in[0], {7}, in[1]); }, {x, w});
}

TEST(LayerNormGradTest, TransposedInput) {
  Generator gen(3);
  Tensor xt = RandLeaf({7, 5}, &gen, -2, 2);  // x = xt^T: (5, 7)
  Tensor w = RandLeaf({7}, &gen), b = RandLeaf({7}, &gen);
  EXPECT_GRADCHECK(
      [](auto& in) { return LayerNorm(Transpose(in[0], 0, 1), {7}, in[1], in[2], 1e-3); },
      {xt, w, b});
}

TEST(LayerNormDeathTest, NormalizedShapeMustBeTrailingDims) {
  EXPECT_DEATH(LayerNorm(Ones({2, 3}), {2}),
               "layer_norm: normalized_shape \\[2\\] must be the trailing dims of the input "
               "shape \\[2, 3\\]");
  EXPECT_DEATH(LayerNorm(Ones({2, 3}), {3}, Ones({4})),
               "layer_norm: weight shape \\[4\\] must be \\[3\\]");
}

TEST(BatchNormTest, TrainingUpdatesRunningStatsWithUnbiasedVariance) {
  Tensor x = FromVector<double>({1, 2, 3, 4}, {2, 1, 2});  // one channel, four values
  Tensor running_mean = Zeros({1}, Options(DType::kFloat64));
  Tensor running_var = Ones({1}, Options(DType::kFloat64));
  const uint32_t version = running_mean.version();
  Tensor y = BatchNorm(x, running_mean, running_var, Tensor(), Tensor(), /*training=*/true);
  ExpectNear(ToVector<double>(y), kNormalized, 1e-12);  // the biased variance normalises
  EXPECT_NEAR(running_mean.item(), 0.9 * 0 + 0.1 * 2.5, 1e-15);
  EXPECT_NEAR(running_var.item(), 0.9 * 1 + 0.1 * (5.0 / 3), 1e-15);
  EXPECT_GT(running_mean.version(), version);
  BatchNorm(x, running_mean, running_var, Tensor(), Tensor(), true, /*momentum=*/0.5);
  EXPECT_NEAR(running_mean.item(), 0.5 * 0.25 + 0.5 * 2.5, 1e-15);
}

TEST(BatchNormTest, StridedRunningStatsAreUpdatedThroughTheView) {
  Tensor x = FromVector<double>({1, 2, 3, 4}, {2, 1, 2});
  Tensor stats = FromVector<double>({0, 1, 7, 7});  // running_mean = [0], running_var = [1]
  Tensor running_mean = Slice(stats, 0, 0, 1), running_var = Slice(stats, 0, 1, 4, 4);
  Tensor strided = Slice(FromVector<double>({0, 9, 0, 9}), 0, 0, 4, 2);  // [0, 0], stride 2
  ASSERT_FALSE(strided.is_contiguous());
  BatchNorm(x, running_mean, running_var, Tensor(), Tensor(), /*training=*/true);
  ExpectNear(ToVector<double>(stats), {0.25, 0.9 + 0.1 * (5.0 / 3), 7, 7}, 1e-15);
  // Two channels whose running mean is every other element of a buffer.
  Tensor x2 = FromVector<double>({1, 10, 2, 20, 3, 30, 4, 40}, {4, 2});
  const uint32_t version = strided.version();
  BatchNorm(x2, strided, Ones({2}, Options(DType::kFloat64)), Tensor(), Tensor(), true, 0.5);
  EXPECT_GT(strided.version(), version);
  ExpectNear(ToVector<double>(strided), {1.25, 12.5}, 1e-15);
}

TEST(BatchNormTest, EvalModeUsesRunningStatsAndLeavesThemAlone) {
  Tensor x = FromVector<double>({1, 3, 5, 7}, {2, 2});  // (N, C) = (2, 2)
  Tensor running_mean = FromVector<double>({1, 2});
  Tensor running_var = FromVector<double>({4, 1});
  Tensor w = FromVector<double>({2, 1}), b = FromVector<double>({0, 10});
  Tensor y = BatchNorm(x, running_mean, running_var, w, b, /*training=*/false, 0.1, 0.0);
  // channel 0: (x - 1) / 2 * 2; channel 1: (x - 2) / 1 + 10
  ExpectNear(ToVector<double>(y), {0, 11, 4, 15}, 1e-12);
  EXPECT_EQ(ToVector<double>(running_mean), (std::vector<double>{1, 2}));
  EXPECT_EQ(ToVector<double>(running_var), (std::vector<double>{4, 1}));
}

TEST(BatchNormTest, TrainingWithoutRunningStatsUsesBatchStatistics) {
  Tensor x = FromVector<double>({1, 2, 3, 4}, {4, 1});
  ExpectNear(ToVector<double>(BatchNorm(x, Tensor(), Tensor(), Tensor(), Tensor(), true)),
             kNormalized, 1e-12);
}

TEST(BatchNormTest, IsRecordedAsNativeBatchNorm) {
  Tensor x = FromVector<double>({1, 2, 3, 4}, {2, 2});
  x.set_requires_grad(true);
  EXPECT_STREQ(BatchNorm(x, Tensor(), Tensor(), Tensor(), Tensor(), true).grad_fn()->name(),
               "NativeBatchNormBackward0");
}

TEST(BatchNormGradTest, TrainingModeForSpatialAndFlatInputs) {
  Generator gen(4);
  Tensor x = RandLeaf({4, 3, 5}, &gen, -2, 2), x2 = RandLeaf({6, 3}, &gen, -2, 2);
  Tensor w = RandLeaf({3}, &gen), b = RandLeaf({3}, &gen);
  auto f = [](auto& in) { return BatchNorm(in[0], Tensor(), Tensor(), in[1], in[2], true); };
  EXPECT_GRADCHECK(f, {x, w, b});
  EXPECT_GRADCHECK(f, {x2, w, b});
  EXPECT_GRADCHECK([](auto& in) { return BatchNorm(in[0], Tensor(), Tensor(), {}, {}, true); },
                   {x});
}

TEST(BatchNormGradTest, EvalModeAndTransposedInput) {
  Generator gen(5);
  Tensor rm = FromVector<double>({0.1, -0.2, 0.3}), rv = FromVector<double>({0.5, 1.5, 2.0});
  Tensor x = RandLeaf({4, 3, 2}, &gen, -2, 2);
  Tensor w = RandLeaf({3}, &gen), b = RandLeaf({3}, &gen);
  EXPECT_GRADCHECK([&](auto& in) { return BatchNorm(in[0], rm, rv, in[1], in[2], false); },
                   {x, w, b});
  Tensor xt = RandLeaf({3, 5}, &gen, -2, 2);  // x = xt^T: (5, 3)
  EXPECT_GRADCHECK(
      [](auto& in) {
        return BatchNorm(Transpose(in[0], 0, 1), Tensor(), Tensor(), in[1], in[2], true);
      },
      {xt, w, b});
}

TEST(BatchNormDeathTest, BadArgumentsAreNamed) {
  EXPECT_DEATH(BatchNorm(Ones({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
               "batch_norm: expected more than 1 value per channel when training");
  EXPECT_DEATH(BatchNorm(Ones({2, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false),
               "batch_norm: running_mean and running_var are required when not training");
  EXPECT_DEATH(BatchNorm(Ones({2, 3}), Zeros({2}), Ones({2}), Tensor(), Tensor(), true),
               "batch_norm: running_mean shape \\[2\\] must be \\[3\\]");
}

}  // namespace
}  // namespace trainyard::ops
