// The conv kernels' col matrices and bias gradient against their definitions, on shapes that
// take the shifted-tap path (Note [Shifted taps] in conv.cc) and shapes that do not.
#include "kernels/cpu/conv.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace trainyard::kernels::cpu {
namespace {

std::vector<double> RandomVector(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = dist(*rng);
  return v;
}

// (channels, H, W, kH, kW, stride, pad_h, pad_w, dilation).
struct Geometry {
  int64_t c, h, w, kh, kw, stride, ph, pw, dil;
};

Conv2dShape ShapeOf(const Geometry& g) {
  Conv2dShape s;
  s.in_channels = g.c;
  s.height = g.h;
  s.width = g.w;
  s.kernel_h = g.kh;
  s.kernel_w = g.kw;
  s.stride_h = s.stride_w = g.stride;
  s.pad_h = g.ph;
  s.pad_w = g.pw;
  s.dilation_h = s.dilation_w = g.dil;
  s.out_h = WindowOutSize(g.h, g.kh, g.stride, g.ph, g.dil);
  s.out_w = WindowOutSize(g.w, g.kw, g.stride, g.pw, g.dil);
  return s;
}

const std::vector<Geometry>& Geometries() {
  static const std::vector<Geometry> g = {
      {2, 7, 5, 3, 3, 1, 1, 1, 1},   // "same": shifted taps
      {3, 6, 9, 5, 3, 1, 2, 1, 1},   // same along the rows only, kernel taller than wide
      {1, 5, 8, 3, 3, 1, 2, 2, 2},   // dilated, shifted taps
      {2, 4, 4, 3, 3, 1, 3, 1, 1},   // padding wider than the kernel's reach: empty rows
      {2, 9, 7, 3, 2, 2, 1, 0, 1},   // strided: the general path
      {1, 6, 6, 2, 2, 1, 0, 0, 1}};  // valid convolution: the general path
  return g;
}

TEST(ConvKernelTest, Im2ColMatchesTheDefinition) {
  std::mt19937 rng(1);
  for (const Geometry& g : Geometries()) {
    const Conv2dShape s = ShapeOf(g);
    SCOPED_TRACE(::testing::Message() << "c=" << g.c << " h=" << g.h << " w=" << g.w);
    auto im = RandomVector(g.c * g.h * g.w, &rng);
    const int64_t l = s.out_h * s.out_w;
    std::vector<double> col(g.c * g.kh * g.kw * l, 99.0);
    Im2Col<double>(s, g.c, im.data(), col.data());
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj)
          for (int64_t oh = 0; oh < s.out_h; ++oh)
            for (int64_t ow = 0; ow < s.out_w; ++ow) {
              const int64_t ih = oh * g.stride - g.ph + ki * g.dil;
              const int64_t iw = ow * g.stride - g.pw + kj * g.dil;
              const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
              const double want = inside ? im[(c * g.h + ih) * g.w + iw] : 0.0;
              ASSERT_EQ(col[((c * g.kh + ki) * g.kw + kj) * l + oh * s.out_w + ow], want)
                  << "c=" << c << " ki=" << ki << " kj=" << kj << " oh=" << oh << " ow=" << ow;
            }
  }
}

TEST(ConvKernelTest, Col2ImIsTheAdjointOfIm2Col) {
  // <Im2Col(x), y> == <x, Col2Im(y)> for every x, y.
  std::mt19937 rng(2);
  for (const Geometry& g : Geometries()) {
    const Conv2dShape s = ShapeOf(g);
    SCOPED_TRACE(::testing::Message() << "c=" << g.c << " h=" << g.h << " w=" << g.w);
    const int64_t l = s.out_h * s.out_w, rows = g.c * g.kh * g.kw;
    auto x = RandomVector(g.c * g.h * g.w, &rng), y = RandomVector(rows * l, &rng);
    std::vector<double> col(rows * l), im(x.size(), 99.0);
    Im2Col<double>(s, g.c, x.data(), col.data());
    Col2Im<double>(s, g.c, y.data(), im.data());
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < col.size(); ++i) lhs += col[i] * y[i];
    for (size_t i = 0; i < im.size(); ++i) rhs += x[i] * im[i];
    EXPECT_NEAR(lhs, rhs, 1e-12);
  }
}

TEST(ConvKernelTest, BiasGradientSumsOverTheBatchAndThePixels) {
  std::mt19937 rng(3);
  Conv2dShape s;
  s.batch = 3;
  s.out_channels = 4;
  s.out_h = 5;
  s.out_w = 7;
  const int64_t l = s.out_h * s.out_w;
  auto gy = RandomVector(s.batch * s.out_channels * l, &rng);
  std::vector<double> gb(s.out_channels);
  Conv2dBackwardBias<double>(s, gy.data(), gb.data());
  for (int64_t o = 0; o < s.out_channels; ++o) {
    double want = 0;
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t i = 0; i < l; ++i) want += gy[(n * s.out_channels + o) * l + i];
    EXPECT_NEAR(gb[o], want, 1e-12);
  }
}

}  // namespace
}  // namespace trainyard::kernels::cpu
