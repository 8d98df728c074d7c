#include "worker/ops/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/node.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

TEST(SoftmaxGradTest, EveryDimOfAnOddShapeMatchesFiniteDifferences) {
  Generator gen(1);
  Tensor x = RandLeaf({3, 5, 7}, &gen, -3, 3);
  for (int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    EXPECT_GRADCHECK([dim](auto& in) { return Softmax(in[0], dim); }, {x});
    EXPECT_GRADCHECK([dim](auto& in) { return LogSoftmax(in[0], dim); }, {x});
  }
}

TEST(SoftmaxGradTest, TransposedAndSlicedInputs) {
  Generator gen(2);
  Tensor x = RandLeaf({7, 5}, &gen, -3, 3);
  Tensor w = RandLeaf({5, 12}, &gen, -3, 3);
  EXPECT_GRADCHECK([](auto& in) { return Softmax(Transpose(in[0], 0, 1), -1); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return LogSoftmax(Transpose(in[0], 0, 1), 0); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return LogSoftmax(Slice(in[0], 1, 1, 12, 3), 1); }, {w});
}

TEST(SoftmaxTest, ValuesMatchHandComputedOnes) {
  Tensor x = FromVector<double>({1, 2, 3});
  // exp(k) / (e + e^2 + e^3)
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  std::vector<double> s = ToVector<double>(Softmax(x, 0));
  std::vector<double> ls = ToVector<double>(LogSoftmax(x, 0));
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(s[k], std::exp(k + 1.0) / z, 1e-15);
    EXPECT_NEAR(ls[k], (k + 1.0) - std::log(z), 1e-15);
  }
}

TEST(SoftmaxTest, LargeLogitsDoNotOverflow) {
  std::vector<float> s = ToVector<float>(Softmax(FromVector<float>({1000, 1001}), 0));
  EXPECT_NEAR(s[0], 0.26894142f, 1e-6f);
  EXPECT_NEAR(s[1], 0.73105858f, 1e-6f);
  std::vector<float> ls = ToVector<float>(LogSoftmax(FromVector<float>({-1000, 0}), 0));
  EXPECT_NEAR(ls[0], -1000.0f, 1e-3f);
  EXPECT_EQ(ls[1], 0.0f);
}

TEST(SoftmaxTest, FloatRowsAlongAMiddleDimMatchDouble) {
  Generator gen(3);
  Tensor x = Randn({4, 300, 3}, Options(DType::kFloat64), &gen);
  Tensor xf = To(MulScalar(x, 5.0), DType::kFloat32);
  Tensor sf = Softmax(xf, 1);
  EXPECT_EQ(sf.shape(), x.shape());
  std::vector<double> got = ToVector<double>(sf);
  std::vector<double> ref = ToVector<double>(Softmax(To(xf, DType::kFloat64), 1));
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6 * ref[i] + 1e-9);
  std::vector<double> sums = ToVector<double>(Sum(sf, {1}));
  for (double v : sums) EXPECT_NEAR(v, 1.0, 1e-5);
}

TEST(SoftmaxTest, ScalarInputGivesOneAndZero) {
  EXPECT_EQ(Softmax(Scalar(3.5), 0).item(), 1.0);
  EXPECT_EQ(LogSoftmax(Scalar(3.5), -1).item(), 0.0);
  EXPECT_EQ(Softmax(Scalar(3.5), 0).dim(), 0);
}

TEST(SoftmaxTest, NodeNamesFollowPyTorch) {
  Tensor x = Ones({2, 3}, TensorOptions().set_requires_grad(true));
  EXPECT_STREQ(Softmax(x, 1).grad_fn()->name(), "SoftmaxBackward0");
  EXPECT_STREQ(LogSoftmax(x, 0).grad_fn()->name(), "LogSoftmaxBackward0");
}

TEST(SoftmaxDeathTest, OutOfRangeDimIsAnError) {
  EXPECT_DEATH(Softmax(Ones({2, 3}), 2), "softmax: dim 2 is out of range");
}

}  // namespace
}  // namespace trainyard::ops
