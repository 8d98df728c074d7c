// The 2x2 max-pool fast path (pool.cc) against the definition: first maximum in window order,
// NaN counts as the maximum (the last NaN wins, as in PyTorch), odd sizes leave pixels unread.
#include "kernels/cpu/pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace trainyard::kernels::cpu {
namespace {

Pool2dShape Plain2x2(int64_t planes, int64_t h, int64_t w) {
  Pool2dShape s;
  s.planes = planes;
  s.height = h;
  s.width = w;
  s.kernel_h = s.kernel_w = 2;
  s.stride_h = s.stride_w = 2;
  s.out_h = h / 2;
  s.out_w = w / 2;
  return s;
}

// Small integers so that ties are common, and a few NaNs.
std::vector<float> Input(int64_t n, std::mt19937* rng) {
  std::uniform_int_distribution<int> dist(0, 4);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(*rng));
  for (int64_t i = 5; i < n; i += 37) v[i] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

TEST(MaxPoolKernelTest, TwoByTwoWindowsMatchTheDefinitionOnEvenAndOddSizes) {
  std::mt19937 rng(1);
  // Rows of 1 to 12 outputs cover the scalar rows and the overlapping 8-lane groups.
  for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{
           {4, 4}, {7, 5}, {28, 28}, {14, 14}, {6, 17}, {3, 24}, {5, 2}}) {
    SCOPED_TRACE(::testing::Message() << "h=" << h << " w=" << w);
    const Pool2dShape s = Plain2x2(3, h, w);
    const int64_t hw = h * w, ohw = s.out_h * s.out_w;
    auto x = Input(s.planes * hw, &rng);
    std::vector<float> y(s.planes * ohw);
    std::vector<int64_t> arg(y.size());
    MaxPool2dForward<float>(s, x.data(), y.data(), arg.data());
    std::vector<float> gy(y.size());
    for (size_t i = 0; i < gy.size(); ++i) gy[i] = static_cast<float>(i + 1);
    std::vector<float> gx(x.size(), 99.0f);
    MaxPool2dBackward<float>(s, gy.data(), arg.data(), gx.data());
    std::vector<float> gx_want(x.size(), 0.0f);
    for (int64_t p = 0; p < s.planes; ++p)
      for (int64_t oh = 0; oh < s.out_h; ++oh)
        for (int64_t ow = 0; ow < s.out_w; ++ow) {
          int64_t best = -1;
          for (int64_t t = 0; t < 4; ++t) {
            const int64_t i = (2 * oh + t / 2) * w + 2 * ow + t % 2;
            const float v = x[p * hw + i];
            if (best < 0 || v > x[p * hw + best] || std::isnan(v)) best = i;
          }
          const int64_t o = p * ohw + oh * s.out_w + ow;
          ASSERT_EQ(arg[o], best) << "p=" << p << " oh=" << oh << " ow=" << ow;
          const float want = x[p * hw + best];
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(y[o]));
          } else {
            EXPECT_EQ(y[o], want);
          }
          gx_want[p * hw + best] = gy[o];
        }
    EXPECT_EQ(gx, gx_want);
  }
}

}  // namespace
}  // namespace trainyard::kernels::cpu
