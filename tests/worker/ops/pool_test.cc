#include "worker/ops/pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/node.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

// x: (1, 1, 4, 4) holding 0, 1, ..., 15 row by row (times `scale`, plus `shift`).
Tensor Grid4x4(float scale = 1, float shift = 0) {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = scale * static_cast<float>(i) + shift;
  return FromVector<float>(v, {1, 1, 4, 4});
}

// The gradient of sum(f(x)) with respect to x.
std::vector<float> GradOfSum(const Tensor& x_values,
                             const std::function<Tensor(const Tensor&)>& f) {
  Tensor x = x_values.detach();
  x.set_requires_grad(true);
  Tensor y = f(x);
  auto g = autograd::Grad({y}, {x}, {OnesLike(y)});
  EXPECT_TRUE(g.ok());
  return ToVector<float>((*g)[0]);
}

TEST(MaxPool2dTest, PaddingReadsMinusInfinity) {
  // Windows of 3 with stride 2 and padding 1 over a 4x4 grid: rows/cols {0,1} and {1,2,3}.
  EXPECT_EQ(ToVector<float>(MaxPool2d(Grid4x4(), 3, 2, 1)), (std::vector<float>{5, 7, 13, 15}));
  // All values negative: a zero-padded max would give 0.
  EXPECT_EQ(ToVector<float>(MaxPool2d(Grid4x4(-1, -1), 3, 2, 1)),
            (std::vector<float>{-1, -2, -5, -6}));
}

TEST(MaxPool2dTest, StrideDefaultsToTheKernelSize) {
  Tensor y = MaxPool2d(Grid4x4(), 2);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(ToVector<float>(y), (std::vector<float>{5, 7, 13, 15}));
  Tensor r = MaxPool2d(Grid4x4(), 2, 1, 0, 0, 0, 0);  // rectangular (2, 1) windows
  EXPECT_EQ(r.shape(), (Shape{1, 1, 2, 4}));
  EXPECT_EQ(ToVector<float>(r), (std::vector<float>{4, 5, 6, 7, 12, 13, 14, 15}));
}

TEST(MaxPool2dTest, DilationSkipsPixels) {
  // Row [3, 9, 1, 4, 2] with a (1, 2) kernel dilated by 2 compares columns (0, 2), (1, 3), (2, 4).
  Tensor x = FromVector<float>({3, 9, 1, 4, 2}, {1, 1, 5});
  Tensor y = MaxPool2d(x, 1, 2, 1, 1, 0, 0, /*dilation=*/2);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3}));
  EXPECT_EQ(ToVector<float>(y), (std::vector<float>{3, 9, 2}));
}

TEST(MaxPool2dTest, GradientGoesToTheFirstMaximumOfATie) {
  Tensor x = Ones({1, 2, 4});  // (C, H, W), every window a tie
  EXPECT_EQ(GradOfSum(x, [](const Tensor& v) { return MaxPool2d(v, 2); }),
            (std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0}));
  // Overlapping windows (stride 1) each send their gradient to their own first pixel.
  EXPECT_EQ(GradOfSum(x, [](const Tensor& v) { return MaxPool2d(v, 2, 1); }),
            (std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0}));
  // A maximum shared by overlapping windows receives the sum of their gradients.
  Tensor peak = FromVector<float>({0, 0, 0, 0, 5, 0, 0, 0, 0}, {1, 3, 3});
  EXPECT_EQ(GradOfSum(peak, [](const Tensor& v) { return MaxPool2d(v, 2, 1); }),
            (std::vector<float>{0, 0, 0, 0, 4, 0, 0, 0, 0}));
}

TEST(MaxPool2dTest, NanIsTheMaximum) {
  Tensor x = FromVector<float>({1, NAN, 3, 4}, {1, 2, 2});
  EXPECT_TRUE(std::isnan(ToVector<float>(MaxPool2d(x, 2))[0]));
}

TEST(MaxPool2dTest, RecordsMaxPool2DWithIndicesBackward0) {
  Tensor x = Ones({1, 2, 2}, TensorOptions().set_requires_grad(true));
  EXPECT_EQ(std::string(MaxPool2d(x, 2).grad_fn()->name()), "MaxPool2DWithIndicesBackward0");
}

TEST(MaxPool2dGradTest, StridedPaddedAndDilatedWindows) {
  Generator gen(21);
  Tensor x = RandLeaf({2, 3, 7, 6}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return MaxPool2d(in[0], 3, 2, 1); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return MaxPool2d(in[0], 3, 2, 1, 2, 1, 0, 2); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return MaxPool2d(in[0], 2); }, {x});
}

TEST(MaxPool2dGradTest, NonContiguousAndUnbatchedInputs) {
  Generator gen(22);
  Tensor x = RandLeaf({2, 3, 6, 7}, &gen);
  Tensor u = RandLeaf({4, 7, 6}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return MaxPool2d(Transpose(in[0], 2, 3), 3, 2, 1); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return MaxPool2d(in[0], 2, 2, 1, 1, 1, 0); }, {u});
}

TEST(AvgPool2dTest, CountIncludePadChangesOnlyTheBorderDivisors) {
  // Window sums over the 4x4 grid with kernel 3, stride 2, padding 1: 10, 24, 51, 90 over
  // 4, 6, 6, 9 input pixels.
  EXPECT_EQ(ToVector<float>(AvgPool2d(Grid4x4(), 3, 2, 1, /*count_include_pad=*/true)),
            (std::vector<float>{10.f / 9, 24.f / 9, 51.f / 9, 10}));
  EXPECT_EQ(ToVector<float>(AvgPool2d(Grid4x4(), 3, 2, 1, /*count_include_pad=*/false)),
            (std::vector<float>{2.5f, 4, 8.5f, 10}));
}

TEST(AvgPool2dTest, RectangularWindowsWithDefaultStride) {
  Tensor y = AvgPool2d(Grid4x4(), 1, 2, 0, 0, 0, 0);  // (1, 2) windows, stride (1, 2)
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 2}));
  EXPECT_EQ(ToVector<float>(y), (std::vector<float>{0.5, 2.5, 4.5, 6.5, 8.5, 10.5, 12.5, 14.5}));
}

TEST(AvgPool2dTest, GradientSpreadsEvenlyOverEachWindow) {
  // Kernel 3, stride 2, padding 1, count_include_pad: every window divides by 9.
  std::vector<float> g =
      GradOfSum(Grid4x4(), [](const Tensor& v) { return AvgPool2d(v, 3, 2, 1); });
  // Pixel (1, 1) lies in all four windows, (0, 0) in one, (0, 1) in two.
  EXPECT_FLOAT_EQ(g[1 * 4 + 1], 4.f / 9);
  EXPECT_FLOAT_EQ(g[0], 1.f / 9);
  EXPECT_FLOAT_EQ(g[1], 2.f / 9);
}

TEST(AvgPool2dTest, RecordsAvgPool2DBackward0) {
  Tensor x = Ones({1, 2, 2}, TensorOptions().set_requires_grad(true));
  EXPECT_EQ(std::string(AvgPool2d(x, 2).grad_fn()->name()), "AvgPool2DBackward0");
}

TEST(AvgPool2dGradTest, StridedPaddedWindowsWithAndWithoutPadCounting) {
  Generator gen(23);
  Tensor x = RandLeaf({2, 3, 7, 6}, &gen);
  for (bool include : {true, false}) {
    SCOPED_TRACE(include);
    EXPECT_GRADCHECK([&](auto& in) { return AvgPool2d(in[0], 3, 2, 1, include); }, {x});
    EXPECT_GRADCHECK([&](auto& in) { return AvgPool2d(in[0], 2, 3, 1, 2, 1, 1, include); }, {x});
  }
}

TEST(AvgPool2dGradTest, NonContiguousAndUnbatchedInputs) {
  Generator gen(24);
  Tensor x = RandLeaf({2, 3, 6, 7}, &gen);
  Tensor u = RandLeaf({4, 7, 6}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return AvgPool2d(Transpose(in[0], 2, 3), 3, 2, 1, false); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return AvgPool2d(in[0], 2); }, {u});
}

TEST(AdaptiveAvgPool2dTest, BinsOverlapLikePyTorch) {
  // H = 5 into 3 bins: rows [0, 2), [1, 4), [3, 5).
  Tensor x = FromVector<float>({1, 2, 3, 4, 5}, {1, 5, 1});
  Tensor y = AdaptiveAvgPool2d(x, 3, 1);
  EXPECT_EQ(y.shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(ToVector<float>(y), (std::vector<float>{1.5, 3, 4.5}));
  // More bins than pixels: each bin repeats a pixel or averages two neighbours.
  Tensor z = AdaptiveAvgPool2d(FromVector<float>({2, 4}, {1, 1, 2}), 1, 3);
  EXPECT_EQ(ToVector<float>(z), (std::vector<float>{2, 3, 4}));
}

TEST(AdaptiveAvgPool2dTest, OneBinIsTheGlobalMean) {
  Tensor y = AdaptiveAvgPool2d(Grid4x4(), 1);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_FLOAT_EQ(y.item(), 7.5f);
}

TEST(AdaptiveAvgPool2dTest, RecordsAdaptiveAvgPool2DBackward0) {
  Tensor x = Ones({1, 2, 2}, TensorOptions().set_requires_grad(true));
  EXPECT_EQ(std::string(AdaptiveAvgPool2d(x, 1).grad_fn()->name()), "AdaptiveAvgPool2DBackward0");
}

TEST(AdaptiveAvgPool2dGradTest, ShrinkingGrowingAndNonContiguousInputs) {
  Generator gen(25);
  Tensor x = RandLeaf({2, 3, 7, 6}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return AdaptiveAvgPool2d(in[0], 3, 4); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return AdaptiveAvgPool2d(in[0], 9, 5); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return AdaptiveAvgPool2d(Transpose(in[0], 2, 3), 4); }, {x});
  Tensor u = RandLeaf({3, 5, 7}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return AdaptiveAvgPool2d(in[0], 2, 3); }, {u});
}

TEST(PoolDeathTest, BadShapesAndWindowsAreNamed) {
  EXPECT_DEATH(MaxPool2d(Zeros({4, 4}), 2),
               "max_pool2d: input must be \\(N, C, H, W\\) or \\(C, H, W\\), got shape \\[4, 4\\]");
  EXPECT_DEATH(MaxPool2d(Zeros({1, 4, 4}), 3, 1, 2),
               "max_pool2d: padding \\(2, 2\\) must be between 0 and half the kernel size");
  EXPECT_DEATH(AvgPool2d(Zeros({1, 2, 2}), 3), "avg_pool2d: the output would be empty");
  EXPECT_DEATH(AvgPool2d(Zeros({1, 4, 4}), 0), "avg_pool2d: kernel size \\(0, 0\\) must be");
  EXPECT_DEATH(MaxPool2d(Zeros({1, 4, 4}), 2, -1), "max_pool2d: stride \\(-1, -1\\) must be");
  EXPECT_DEATH(AdaptiveAvgPool2d(Zeros({1, 4, 4}), 0, 2),
               "adaptive_avg_pool2d: output size \\(0, 2\\) must be at least 1");
  EXPECT_DEATH(AdaptiveAvgPool2d(Zeros({1, 0, 4}), 2), "must have non-empty \\(C, H, W\\)");
  EXPECT_DEATH(AvgPool2d(Zeros({1, 4, 4}, Options(DType::kInt64)), 2),
               "avg_pool2d: dtype int64 is not supported");
}

}  // namespace
}  // namespace trainyard::ops
