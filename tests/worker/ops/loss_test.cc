#include "worker/ops/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/node.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

// Rows [1, 2, 3], [1, 1, 1], [0.5, -1, 2] with targets 2, 0, 1: losses are
// logsumexp(row) - row[target], computed independently (Python, math.log/exp).
constexpr double kLoss0 = 0.4076059644443806;
constexpr double kLoss1 = 1.09861228866811;
constexpr double kLoss2 = 3.241311296657157;

Tensor Logits() { return FromVector<double>({1, 2, 3, 1, 1, 1, 0.5, -1, 2}, {3, 3}); }
Tensor Targets(std::vector<int64_t> t) { return FromVector<int64_t>(t); }
CrossEntropyOptions Reduce(const char* reduction) {
  CrossEntropyOptions o;
  o.reduction = reduction;
  return o;
}

TEST(CrossEntropyTest, MatchesHandComputedLossesForEveryReduction) {
  Tensor t = Targets({2, 0, 1});
  std::vector<double> none = ToVector<double>(CrossEntropy(Logits(), t, Reduce("none")));
  ASSERT_EQ(none.size(), 3u);
  EXPECT_NEAR(none[0], kLoss0, 1e-12);
  EXPECT_NEAR(none[1], kLoss1, 1e-12);
  EXPECT_NEAR(none[2], kLoss2, 1e-12);
  EXPECT_NEAR(CrossEntropy(Logits(), t, Reduce("sum")).item(), kLoss0 + kLoss1 + kLoss2, 1e-12);
  EXPECT_NEAR(CrossEntropy(Logits(), t).item(), (kLoss0 + kLoss1 + kLoss2) / 3, 1e-12);
}

TEST(CrossEntropyTest, IgnoredTargetsDoNotCountInTheMean) {
  Tensor logits = Logits();
  logits.set_requires_grad(true);
  Tensor loss = CrossEntropy(logits, Targets({2, -100, 1}));
  EXPECT_NEAR(loss.item(), (kLoss0 + kLoss2) / 2, 1e-12);
  ASSERT_TRUE(autograd::Backward(loss).ok());
  std::vector<double> g = ToVector<double>(logits.grad());
  for (int j = 3; j < 6; ++j) EXPECT_EQ(g[j], 0.0) << "the ignored row gets no gradient";
  EXPECT_NE(g[0], 0.0);
  // Any ignore_index works, including a valid class id.
  CrossEntropyOptions o;
  o.ignore_index = 0;
  EXPECT_NEAR(CrossEntropy(Logits(), Targets({2, 0, 1}), o).item(), (kLoss0 + kLoss2) / 2, 1e-12);
  std::vector<double> none =
      ToVector<double>(CrossEntropy(Logits(), Targets({2, -100, 1}), Reduce("none")));
  EXPECT_EQ(none[1], 0.0);
}

TEST(CrossEntropyTest, LabelSmoothingMixesNllWithTheMeanNegativeLogProbability) {
  CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  // (1 - 0.1) * nll + 0.1 * (logsumexp(row) - mean(row)), ignored row excluded from the mean.
  EXPECT_NEAR(CrossEntropy(Logits(), Targets({2, -100, 1}), o).item(), 1.799458630550769, 1e-12);
  o.reduction = "none";
  std::vector<double> none = ToVector<double>(CrossEntropy(Logits(), Targets({2, -100, 1}), o));
  EXPECT_NEAR(none[0], 0.5076059644443807, 1e-12);
  EXPECT_EQ(none[1], 0.0);
  EXPECT_NEAR(none[2], 3.091311296657157, 1e-12);
}

TEST(CrossEntropyTest, SpatialTargetsMatchTheRowsMovedToTheBatch) {
  Generator gen(1);
  Tensor logits = Randn({2, 3, 4}, Options(DType::kFloat64), &gen);  // (N, C, d1)
  Tensor target = FromVector<int64_t>({0, 1, 2, 1, 2, 2, 0, -100}, {2, 4});
  Tensor rows = Reshape(Permute(logits, {0, 2, 1}), {8, 3});
  std::vector<double> ref =
      ToVector<double>(CrossEntropy(rows, Reshape(target, {8}), Reduce("none")));
  Tensor none = CrossEntropy(logits, target, Reduce("none"));
  EXPECT_EQ(none.shape(), (Shape{2, 4}));
  std::vector<double> got = ToVector<double>(none);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], ref[i], 1e-12);
  EXPECT_NEAR(CrossEntropy(logits, target).item(), CrossEntropy(rows, Reshape(target, {8})).item(),
              1e-12);
}

TEST(CrossEntropyTest, UnbatchedLogitsGiveAScalarLoss) {
  Tensor loss = CrossEntropy(FromVector<double>({1, 2, 3}), Scalar(2, Options(DType::kInt64)),
                             Reduce("none"));
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.item(), kLoss0, 1e-12);
}

TEST(CrossEntropyTest, MeanOverOnlyIgnoredTargetsIsNan) {
  EXPECT_TRUE(std::isnan(CrossEntropy(Logits(), Targets({-100, -100, -100})).item()));
}

TEST(CrossEntropyTest, IsRecordedAsNllLoss) {
  Tensor logits = Logits();
  logits.set_requires_grad(true);
  EXPECT_STREQ(CrossEntropy(logits, Targets({2, 0, 1})).grad_fn()->name(), "NllLossBackward0");
}

TEST(CrossEntropyGradTest, EveryReductionWithSmoothingAndIgnoredTargets) {
  Generator gen(2);
  Tensor logits = RandLeaf({5, 7}, &gen, -3, 3);
  Tensor target = FromVector<int64_t>({6, 0, -100, 3, 3});
  for (const char* reduction : {"none", "sum", "mean"})
    for (double eps : {0.0, 0.25}) {
      SCOPED_TRACE(::testing::Message() << reduction << " smoothing " << eps);
      CrossEntropyOptions o;
      o.reduction = reduction;
      o.label_smoothing = eps;
      EXPECT_GRADCHECK([&](auto& in) { return CrossEntropy(in[0], target, o); }, {logits});
    }
}

TEST(CrossEntropyGradTest, TransposedLogitsAndSpatialTargets) {
  Generator gen(3);
  Tensor lt = RandLeaf({7, 5}, &gen, -3, 3);  // logits = lt^T: (5, 7)
  Tensor target = FromVector<int64_t>({6, 0, 2, 3, 1});
  EXPECT_GRADCHECK([&](auto& in) { return CrossEntropy(Transpose(in[0], 0, 1), target); }, {lt});
  Tensor spatial = RandLeaf({2, 3, 5}, &gen, -3, 3);  // (N, C, d1)
  Tensor st = FromVector<int64_t>({0, 1, 2, -100, 2, 2, 1, 0, 0, 1}, {2, 5});
  CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  EXPECT_GRADCHECK([&](auto& in) { return CrossEntropy(in[0], st, o); }, {spatial});
}

TEST(CrossEntropyDeathTest, TargetOutOfRangeNamesTheValueAndClassCount) {
  EXPECT_DEATH(CrossEntropy(Logits(), Targets({2, 3, 0})),
               "cross_entropy: target 3 is out of range for 3 classes");
  EXPECT_DEATH(CrossEntropy(Logits(), Targets({2, -1, 0})),
               "cross_entropy: target -1 is out of range for 3 classes");
}

TEST(CrossEntropyDeathTest, BadTargetsAndReductionsAreNamed) {
  EXPECT_DEATH(CrossEntropy(Logits(), Targets({1, 2})),
               "cross_entropy: target shape \\[2\\] does not match logits shape \\[3, 3\\]");
  EXPECT_DEATH(CrossEntropy(Logits(), FromVector<double>({1, 2, 0})),
               "cross_entropy: target must hold int64 class indices, got float64");
  EXPECT_DEATH(CrossEntropy(Logits(), Targets({1, 2, 0}), Reduce("avg")),
               "cross_entropy: reduction \"avg\" is not supported");
}

TEST(MseLossTest, ReductionsOfSquaredDifferences) {
  Tensor input = FromVector<double>({1, 2, 3}), target = FromVector<double>({1, 0, 5});
  EXPECT_EQ(ToVector<double>(MseLoss(input, target, "none")), (std::vector<double>{0, 4, 4}));
  EXPECT_EQ(MseLoss(input, target, "sum").item(), 8.0);
  EXPECT_NEAR(MseLoss(input, target).item(), 8.0 / 3, 1e-15);
  input.set_requires_grad(true);
  EXPECT_STREQ(MseLoss(input, target).grad_fn()->name(), "MseLossBackward0");
}

TEST(MseLossGradTest, BroadcastAndTransposedInputs) {
  Generator gen(4);
  Tensor a = RandLeaf({3, 1}, &gen), b = RandLeaf({4}, &gen);
  Tensor at = RandLeaf({5, 3}, &gen), c = RandLeaf({3, 5}, &gen);
  for (const char* reduction : {"none", "sum", "mean"}) {
    SCOPED_TRACE(reduction);
    std::string r = reduction;
    EXPECT_GRADCHECK([r](auto& in) { return MseLoss(in[0], in[1], r); }, {a, b});
    EXPECT_GRADCHECK([r](auto& in) { return MseLoss(Transpose(in[0], 0, 1), in[1], r); }, {at, c});
  }
}

}  // namespace
}  // namespace trainyard::ops
