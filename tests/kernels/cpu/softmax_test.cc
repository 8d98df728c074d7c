#include "kernels/cpu/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace trainyard::kernels::cpu {
namespace {

std::vector<double> RandomVector(size_t n, double scale, std::mt19937* rng) {
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = dist(*rng);
  return v;
}

// log(sum exp(x)) of one row by the definition, in double.
double NaiveLse(const double* x, int64_t n) {
  double m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return m + std::log(s);
}

// Lengths around the 16-lane blocks and the 256-element log-sum-exp chunk.
const int64_t kLengths[] = {1, 15, 17, 257, 300};

TEST(SoftmaxKernelTest, FloatRowsMatchADoubleReferenceOnOddLengths) {
  std::mt19937 rng(3);
  for (int64_t n : kLengths) {
    const int64_t rows = 3;
    auto xd = RandomVector(rows * n, 20.0, &rng);
    std::vector<float> xf(xd.begin(), xd.end()), sm(xf.size()), lsm(xf.size());
    SoftmaxForward<float>(xf.data(), sm.data(), rows, n, false);
    SoftmaxForward<float>(xf.data(), lsm.data(), rows, n, true);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> xr(xf.begin() + r * n, xf.begin() + (r + 1) * n);
      const double lse = NaiveLse(xr.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = std::exp(xr[i] - lse);
        // x - max is rounded to float first: up to ~2.4e-6 relative for |x - max| near 40.
        EXPECT_NEAR(sm[r * n + i], ref, 5e-6 * ref + 1e-30) << "n=" << n;
        EXPECT_NEAR(lsm[r * n + i], xr[i] - lse, 2e-5) << "n=" << n;
      }
    }
  }
}

TEST(SoftmaxKernelTest, BackwardMatchesTheJacobianProduct) {
  std::mt19937 rng(4);
  for (int64_t n : kLengths) {
    auto x = RandomVector(2 * n, 3.0, &rng), gy = RandomVector(2 * n, 1.0, &rng);
    std::vector<double> y(x.size()), ly(x.size()), gx(x.size()), lgx(x.size());
    SoftmaxForward<double>(x.data(), y.data(), 2, n, false);
    SoftmaxForward<double>(x.data(), ly.data(), 2, n, true);
    SoftmaxBackward<double>(y.data(), gy.data(), gx.data(), 2, n, false);
    SoftmaxBackward<double>(ly.data(), gy.data(), lgx.data(), 2, n, true);
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t i = 0; i < n; ++i) {
        // d softmax_j / d x_i = y_j ([i == j] - y_i); d log_softmax_j / d x_i = [i == j] - y_i.
        double ref = 0, lref = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double yi = y[r * n + i], yj = y[r * n + j], g = gy[r * n + j];
          ref += g * yj * ((i == j) - yi);
          lref += g * ((i == j) - yi);
        }
        EXPECT_NEAR(gx[r * n + i], ref, 1e-12);
        EXPECT_NEAR(lgx[r * n + i], lref, 1e-12);
      }
  }
}

TEST(CrossEntropyKernelTest, LossAndGradientMatchTheDefinitionWithSmoothingAndIgnore) {
  std::mt19937 rng(5);
  const int64_t rows = 4, c = 19, ignore = -1;
  const double eps = 0.2;
  auto x = RandomVector(rows * c, 4.0, &rng);
  const std::vector<int64_t> target = {3, ignore, 0, 18};
  std::vector<double> loss(rows), lse(rows), gloss = {0.5, 2.0, -1.0, 1.5}, grad(rows * c);
  CrossEntropyForward<double>(x.data(), target.data(), loss.data(), lse.data(), rows, c, ignore,
                              eps);
  CrossEntropyBackward<double>(x.data(), target.data(), lse.data(), gloss.data(), grad.data(), rows,
                               c, ignore, eps);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * c;
    if (target[r] == ignore) {
      EXPECT_EQ(loss[r], 0.0);
      for (int64_t j = 0; j < c; ++j) EXPECT_EQ(grad[r * c + j], 0.0);
      continue;
    }
    const double l = NaiveLse(xr, c);
    double sum_logp = 0;
    for (int64_t j = 0; j < c; ++j) sum_logp += xr[j] - l;
    EXPECT_NEAR(loss[r], (1 - eps) * (l - xr[target[r]]) + eps * (-sum_logp / c), 1e-12);
    for (int64_t j = 0; j < c; ++j) {
      const double ref = gloss[r] * (std::exp(xr[j] - l) - (1 - eps) * (j == target[r]) - eps / c);
      EXPECT_NEAR(grad[r * c + j], ref, 1e-12);
    }
  }
}

}  // namespace
}  // namespace trainyard::kernels::cpu
