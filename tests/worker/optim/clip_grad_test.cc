#include "worker/optim/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/worker/optim/golden_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

using test_util::FindGoldenCase;
using trainyard::testing::RelativeError;

const double kInf = std::numeric_limits<double>::infinity();

// Runs a clip case of optim.txt: gradients set from copies of grad.<i> (none where missing).
void ExpectClipMatchesTorch(const std::string& name, double max_norm, double norm_type) {
  SCOPED_TRACE(name);
  const auto* c = FindGoldenCase(name);
  if (c == nullptr) return;
  const Shape shapes[] = {{3, 4}, {5}, {2, 3}};
  std::vector<Tensor> params;
  for (int i = 0; i < 3; ++i) {
    params.push_back(Zeros(shapes[i]).set_requires_grad(true));
    const std::string key = "grad." + std::to_string(i);
    if (c->has(key)) params.back().set_grad(ConvertTo(c->at(key), DType::kFloat32, true));
  }
  const double total = ClipGradNorm(params, max_norm, norm_type).item();
  const double want = c->at("total_norm").item();
  EXPECT_NEAR(total, want, 1e-6 * want);
  for (int i = 0; i < 3; ++i) {
    const std::string key = "clipped." + std::to_string(i);
    ASSERT_EQ(params[i].grad().defined(), c->has(key)) << i;
    if (c->has(key)) {
      EXPECT_LE(RelativeError(params[i].grad(), c->at(key)), 1e-6) << i;
    }
  }
}

TEST(ClipGradNormTest, TwoNormMatchesTorch) { ExpectClipMatchesTorch("clip_l2", 1.0, 2.0); }
TEST(ClipGradNormTest, InfinityNormMatchesTorch) { ExpectClipMatchesTorch("clip_inf", 0.5, kInf); }
TEST(ClipGradNormTest, ThreeNormSkippingAMissingGradientMatchesTorch) {
  ExpectClipMatchesTorch("clip_l3", 0.75, 3.0);
}
TEST(ClipGradNormTest, OneNormMatchesTorch) { ExpectClipMatchesTorch("clip_l1", 2.0, 1.0); }
TEST(ClipGradNormTest, GradientsBelowMaxNormAreLeftAloneButTheNormIsReturned) {
  ExpectClipMatchesTorch("clip_below_max", 100.0, 2.0);
}

TEST(ClipGradNormTest, MixedDtypesAndStridedGradientsCountTogether) {
  Tensor a = Zeros({2}).set_requires_grad(true);
  Tensor b = Zeros({2, 2}, Options(DType::kFloat64)).set_requires_grad(true);
  a.set_grad(FromVector<float>({3, 0}));
  Tensor g = FromVector<double>({0, 4, 0, 0}, {2, 2});
  b.set_grad(MakeView(g, {2, 2}, {1, 2}, 0));  // transposed: still one 4 in the norm
  const double total = ClipGradNorm({a, b}, 1.0).item();
  EXPECT_DOUBLE_EQ(total, 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_FLOAT_EQ(ToVector<float>(a.grad())[0], static_cast<float>(3 * coef));
  EXPECT_DOUBLE_EQ(ToVector<double>(g)[1], 4 * coef);
}

TEST(ClipGradNormTest, NoGradientsGiveZero) {
  Tensor a = Zeros({2}).set_requires_grad(true);
  EXPECT_EQ(ClipGradNorm({a}, 1.0).item(), 0.0);
  EXPECT_EQ(ClipGradNorm({}, 1.0).item(), 0.0);
}

TEST(ClipGradNormTest, ANonFiniteNormIsReturnedAndPoisonsTheGradientsAsInTorch) {
  Tensor a = Zeros({2}).set_requires_grad(true);
  a.set_grad(FromVector<float>({std::nanf(""), 1}));
  EXPECT_TRUE(std::isnan(ClipGradNorm({a}, 1.0).item()));
  EXPECT_TRUE(std::isnan(ToVector<float>(a.grad())[1]));
}

TEST(ClipGradNormTest, ValidationNamesTheBadSetting) {
  EXPECT_TRUE(ValidateClipGradNorm(1.0, 2.0).ok());
  EXPECT_TRUE(ValidateClipGradNorm(0.0, kInf).ok());
  EXPECT_EQ(ValidateClipGradNorm(-1, 2).message(),
            "clip_grad_norm: max_norm is -1; it must be finite and at least 0");
  EXPECT_EQ(ValidateClipGradNorm(1, 0).message(),
            "clip_grad_norm: norm_type is 0; it must be finite and positive");
  EXPECT_EQ(ValidateClipGradNorm(1, -kInf).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::optim
