#include "worker/ops/conv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "tests/testing/gradcheck.h"
#include "worker/autograd/node.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

int64_t OutSize(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
}

// The reference: calls fn(x index, weight index, y index) for every product term of a direct
// convolution of x (N, C, H, W) with w (O, C / groups, kH, kW), all indices row-major.
template <typename F>
void ForEachConvTerm(const Shape& xs, const Shape& ws, const Conv2dOptions& o, F fn) {
  const int64_t n_batch = xs[0], c_in = xs[1], h = xs[2], w = xs[3];
  const int64_t c_out = ws[0], cg = ws[1], kh = ws[2], kw = ws[3], og = c_out / o.groups;
  const int64_t oh_n = OutSize(h, kh, o.stride_h, o.pad_h, o.dilation_h);
  const int64_t ow_n = OutSize(w, kw, o.stride_w, o.pad_w, o.dilation_w);
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t oc = 0; oc < c_out; ++oc)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t ki = 0; ki < kh; ++ki)
              for (int64_t kj = 0; kj < kw; ++kj) {
                const int64_t ih = oh * o.stride_h - o.pad_h + ki * o.dilation_h;
                const int64_t iw = ow * o.stride_w - o.pad_w + kj * o.dilation_w;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                const int64_t ci = (oc / og) * cg + c;
                fn(((n * c_in + ci) * h + ih) * w + iw, ((oc * cg + c) * kh + ki) * kw + kj,
                   ((n * c_out + oc) * oh_n + oh) * ow_n + ow);
              }
}

std::vector<double> DirectConv(const Tensor& x, const Tensor& w, const Tensor& b,
                               const Conv2dOptions& o) {
  const Shape& xs = x.shape();
  const int64_t c_out = w.shape()[0];
  const int64_t l = OutSize(xs[2], w.shape()[2], o.stride_h, o.pad_h, o.dilation_h) *
                    OutSize(xs[3], w.shape()[3], o.stride_w, o.pad_w, o.dilation_w);
  std::vector<double> y(static_cast<size_t>(xs[0] * c_out * l), 0.0);
  if (b.defined()) {
    std::vector<double> bv = ToVector<double>(b);
    for (size_t i = 0; i < y.size(); ++i) y[i] = bv[(i / l) % c_out];
  }
  std::vector<double> xv = ToVector<double>(x), wv = ToVector<double>(w);
  ForEachConvTerm(xs, w.shape(), o,
                  [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += xv[xi] * wv[wi]; });
  return y;
}

struct DirectGrads {
  std::vector<double> gx, gw, gb;
};

DirectGrads DirectConvBackward(const Tensor& x, const Tensor& w, const Tensor& gy,
                               const Conv2dOptions& o) {
  std::vector<double> xv = ToVector<double>(x), wv = ToVector<double>(w);
  std::vector<double> gyv = ToVector<double>(gy);
  DirectGrads g{std::vector<double>(xv.size(), 0.0), std::vector<double>(wv.size(), 0.0),
                std::vector<double>(static_cast<size_t>(w.shape()[0]), 0.0)};
  ForEachConvTerm(x.shape(), w.shape(), o, [&](int64_t xi, int64_t wi, int64_t yi) {
    g.gx[xi] += gyv[yi] * wv[wi];
    g.gw[wi] += gyv[yi] * xv[xi];
  });
  const int64_t l = gy.shape()[2] * gy.shape()[3];
  for (size_t i = 0; i < gyv.size(); ++i) g.gb[(i / l) % w.shape()[0]] += gyv[i];
  return g;
}

void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected,
                double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], tol * (1 + std::abs(expected[i]))) << "element " << i;
}

// Checks forward and all three gradients of Conv2d against the direct loops.
void ExpectMatchesDirectLoops(const Shape& xs, const Shape& ws, const Conv2dOptions& o,
                              uint64_t seed) {
  Generator gen(seed);
  Tensor x = RandLeaf(xs, &gen), w = RandLeaf(ws, &gen), b = RandLeaf({ws[0]}, &gen);
  Tensor y = Conv2d(x, w, b, o);
  ExpectNear(ToVector<double>(y), DirectConv(x, w, b, o), 1e-12);
  Tensor gy = Randn(y.shape(), Options(DType::kFloat64), &gen);
  auto grads = autograd::Grad({y}, {x, w, b}, {gy});
  ASSERT_TRUE(grads.ok()) << grads.status().ToString();
  DirectGrads ref = DirectConvBackward(x, w, gy, o);
  ExpectNear(ToVector<double>((*grads)[0]), ref.gx, 1e-12);
  ExpectNear(ToVector<double>((*grads)[1]), ref.gw, 1e-12);
  ExpectNear(ToVector<double>((*grads)[2]), ref.gb, 1e-12);
}

Conv2dOptions Opts(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                   int64_t groups) {
  return Conv2dOptions{sh, sw, ph, pw, dh, dw, groups};
}

TEST(Conv2dTest, StridedPaddedDilatedConvolutionMatchesDirectLoops) {
  const Conv2dOptions o = Opts(2, 1, 1, 2, 2, 1, 1);
  Generator gen(1);
  Tensor x = RandLeaf({2, 3, 7, 6}, &gen), w = RandLeaf({4, 3, 3, 2}, &gen);
  Tensor y = Conv2d(x, w, Tensor(), o);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3, 9}));  // oH = (7 + 2 - 4 - 1) / 2 + 1, oW = 6 + 4 - 1
  ExpectNear(ToVector<double>(y), DirectConv(x, w, Tensor(), o), 1e-12);
  ExpectMatchesDirectLoops({2, 3, 7, 6}, {4, 3, 3, 2}, o, 2);
}

TEST(Conv2dTest, GroupedConvolutionMatchesPerGroupDirectLoops) {
  ExpectMatchesDirectLoops({2, 4, 7, 6}, {6, 2, 3, 3}, Opts(2, 2, 1, 1, 1, 1, 2), 3);
  ExpectMatchesDirectLoops({3, 6, 5, 5}, {6, 1, 3, 3}, Opts(1, 1, 1, 1, 2, 2, 6), 4);  // depthwise
}

TEST(Conv2dTest, PointwiseKernelMatchesDirectLoops) {
  ExpectMatchesDirectLoops({2, 4, 5, 3}, {6, 2, 1, 1}, Opts(1, 1, 0, 0, 1, 1, 2), 5);
}

TEST(Conv2dTest, LargeConvolutionOnTheThreadedGemmPathMatchesDirectLoops) {
  // One group's GEMM is 16 x 144 x 256, above the size where the batch is split over threads.
  ExpectMatchesDirectLoops({2, 16, 16, 16}, {16, 16, 3, 3}, Opts(1, 1, 1, 1, 1, 1, 1), 6);
}

TEST(Conv2dTest, Float32MatchesTheFloat64Result) {
  Generator gen(7);
  Tensor x = Randn({2, 4, 7, 6}, Options(DType::kFloat64), &gen);
  Tensor w = Randn({4, 2, 3, 3}, Options(DType::kFloat64), &gen);
  Tensor b = Randn({4}, Options(DType::kFloat64), &gen);
  const Conv2dOptions o = Opts(2, 1, 1, 1, 1, 2, 2);
  Tensor y32 = Conv2d(To(x, DType::kFloat32), To(w, DType::kFloat32), To(b, DType::kFloat32), o);
  EXPECT_EQ(y32.dtype(), DType::kFloat32);
  ExpectNear(ToVector<double>(y32), DirectConv(x, w, b, o), 1e-5);
}

TEST(Conv2dTest, GradientsAreBitwiseIdenticalForAnyThreadCount) {
  Generator gen(8);
  Tensor x = RandLeaf({7, 3, 9, 8}, &gen), w = RandLeaf({5, 3, 3, 3}, &gen);
  Tensor gy = Randn({7, 5, 4, 3}, Options(DType::kFloat64), &gen);
  const Conv2dOptions o = Opts(2, 2, 0, 0, 1, 1, 1);
  auto run = [&](int threads) {
    kernels::cpu::SetNumThreads(threads);
    Tensor y = Conv2d(x, w, Tensor(), o);
    auto g = autograd::Grad({y}, {x, w}, {gy});
    EXPECT_TRUE(g.ok());
    return std::vector<std::vector<double>>{ToVector<double>(y), ToVector<double>((*g)[0]),
                                            ToVector<double>((*g)[1])};
  };
  const int saved = kernels::cpu::GetNumThreads();
  auto one = run(1);
  auto four = run(4);
  kernels::cpu::SetNumThreads(saved);
  EXPECT_EQ(one, four);
}

TEST(Conv2dTest, UnbatchedInputGivesAnUnbatchedOutput) {
  Generator gen(9);
  Tensor x = RandLeaf({3, 6, 5}, &gen), w = RandLeaf({2, 3, 2, 2}, &gen);
  Tensor b = RandLeaf({2}, &gen);
  Tensor y = Conv2d(x, w, b, /*stride=*/1, /*padding=*/1);
  EXPECT_EQ(y.shape(), (Shape{2, 7, 6}));
  ExpectNear(ToVector<double>(y), ToVector<double>(Conv2d(Unsqueeze(x, 0), w, b, 1, 1)), 0);
}

TEST(Conv2dTest, SquareOverloadMatchesTheOptionsStruct) {
  Generator gen(10);
  Tensor x = RandLeaf({1, 4, 9, 9}, &gen), w = RandLeaf({2, 2, 3, 3}, &gen);
  Tensor a = Conv2d(x, w, Tensor(), 2, 1, 2, 2);
  Tensor b = Conv2d(x, w, Tensor(),
                    Conv2dOptions().set_stride(2).set_padding(1).set_dilation(2).set_groups(2));
  EXPECT_EQ(a.shape(), (Shape{1, 2, 4, 4}));
  EXPECT_EQ(ToVector<double>(a), ToVector<double>(b));
}

TEST(Conv2dTest, RecordsConvolutionBackward0) {
  Tensor x = Ones({1, 1, 3, 3}, TensorOptions().set_requires_grad(true));
  Tensor y = Conv2d(x, Ones({1, 1, 2, 2}));
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(std::string(y.grad_fn()->name()), "ConvolutionBackward0");
  EXPECT_EQ(Conv2d(Ones({1, 1, 3, 3}), Ones({1, 1, 2, 2})).grad_fn(), nullptr);
}

TEST(Conv2dGradTest, StridedPaddedConvolutionWithBias) {
  Generator gen(11);
  Tensor x = RandLeaf({2, 3, 7, 6}, &gen), w = RandLeaf({4, 3, 3, 2}, &gen);
  Tensor b = RandLeaf({4}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Conv2d(in[0], in[1], in[2], Opts(2, 2, 1, 1, 1, 1, 1)); },
                   {x, w, b});
}

TEST(Conv2dGradTest, DilatedGroupedConvolutionWithoutBias) {
  Generator gen(12);
  Tensor x = RandLeaf({2, 4, 7, 6}, &gen), w = RandLeaf({4, 2, 2, 3}, &gen);
  EXPECT_GRADCHECK(
      [](auto& in) { return Conv2d(in[0], in[1], Tensor(), Opts(1, 2, 2, 1, 2, 2, 2)); }, {x, w});
}

TEST(Conv2dGradTest, NonContiguousInput) {
  Generator gen(13);
  Tensor x = RandLeaf({2, 3, 6, 7}, &gen), w = RandLeaf({4, 3, 3, 3}, &gen);
  Tensor b = RandLeaf({4}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Conv2d(Transpose(in[0], 2, 3), in[1], in[2], 2, 1); },
                   {x, w, b});
}

TEST(Conv2dGradTest, UnbatchedInputAndPartialRequiresGrad) {
  Generator gen(14);
  Tensor x = RandLeaf({3, 7, 6}, &gen), w = RandLeaf({2, 3, 3, 3}, &gen);
  Tensor b = RandLeaf({2}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Conv2d(in[0], in[1], in[2], 1, 1); }, {x, w, b});
  Tensor x_const = x.detach(), w_const = w.detach();
  EXPECT_GRADCHECK([&](auto& in) { return Conv2d(x_const, in[0], in[1], 2); }, {w, b});
  EXPECT_GRADCHECK([&](auto& in) { return Conv2d(in[0], w_const, Tensor(), 2); }, {x});
}

TEST(Conv2dDeathTest, ChannelsNotDivisibleByGroupsNameBoth) {
  EXPECT_DEATH(Conv2d(Zeros({1, 3, 5, 5}), Zeros({2, 1, 3, 3}), Tensor(), 1, 0, 1, 2),
               "conv2d: input channels 3 are not divisible by groups 2");
  EXPECT_DEATH(Conv2d(Zeros({1, 4, 5, 5}), Zeros({3, 2, 3, 3}), Tensor(), 1, 0, 1, 2),
               "conv2d: weight's out_channels 3 are not divisible by groups 2");
}

TEST(Conv2dDeathTest, WeightChannelsMustMatchTheInput) {
  EXPECT_DEATH(Conv2d(Zeros({1, 3, 5, 5}), Zeros({2, 2, 3, 3})),
               "expects 2 input channels, but the input \\[1, 3, 5, 5\\] has 3");
}

TEST(Conv2dDeathTest, KernelLargerThanThePaddedInputIsAnError) {
  EXPECT_DEATH(Conv2d(Zeros({1, 1, 3, 3}), Zeros({1, 1, 3, 3}), Tensor(), 1, 0, 2),
               "dilated kernel \\(5, 5\\) does not fit in the padded input \\(3, 3\\)");
}

TEST(Conv2dDeathTest, BadShapesAndOptionsAreNamed) {
  EXPECT_DEATH(Conv2d(Zeros({5, 5}), Zeros({1, 1, 3, 3})),
               "conv2d: input must be \\(N, C, H, W\\) or \\(C, H, W\\), got shape \\[5, 5\\]");
  EXPECT_DEATH(Conv2d(Zeros({1, 1, 5, 5}), Zeros({1, 1, 3})), "conv2d: weight must be");
  EXPECT_DEATH(Conv2d(Zeros({1, 1, 5, 5}), Zeros({2, 1, 3, 3}), Zeros({3})),
               "conv2d: bias must have shape \\[2\\]");
  EXPECT_DEATH(Conv2d(Zeros({1, 1, 5, 5}), Zeros({1, 1, 3, 3}), Tensor(), 0),
               "conv2d: stride \\(0, 0\\) must be at least 1");
  EXPECT_DEATH(Conv2d(Zeros({1, 1, 5, 5}), Zeros({1, 1, 3, 3}, Options(DType::kFloat64))),
               "conv2d: dtypes differ");
}

}  // namespace
}  // namespace trainyard::ops
