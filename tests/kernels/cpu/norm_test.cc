#include "kernels/cpu/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace trainyard::kernels::cpu {
namespace {

std::vector<double> RandomVector(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<double> dist(-2, 3);
  std::vector<double> v(n);
  for (double& x : v) x = dist(*rng);
  return v;
}

TEST(LayerNormKernelTest, ForwardMatchesTheDefinitionAndBackwardSumsDownTheRows) {
  std::mt19937 rng(1);
  const int64_t rows = 5, n = 37;
  auto x = RandomVector(rows * n, &rng), w = RandomVector(n, &rng), b = RandomVector(n, &rng);
  auto gy = RandomVector(rows * n, &rng);
  std::vector<double> y(x.size()), mean(rows), rstd(rows), gw(n), gb(n);
  LayerNormForward<double>(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows,
                           n, 1e-5);
  LayerNormBackward<double>(x.data(), gy.data(), mean.data(), rstd.data(), w.data(), nullptr,
                            gw.data(), gb.data(), rows, n);
  std::vector<double> gw_ref(n, 0), gb_ref(n, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mu += x[r * n + i] / n;
    for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mu) * (x[r * n + i] - mu) / n;
    for (int64_t i = 0; i < n; ++i) {
      const double xhat = (x[r * n + i] - mu) / std::sqrt(var + 1e-5);
      EXPECT_NEAR(y[r * n + i], xhat * w[i] + b[i], 1e-12);
      gw_ref[i] += gy[r * n + i] * xhat;
      gb_ref[i] += gy[r * n + i];
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(gw[i], gw_ref[i], 1e-12);
    EXPECT_NEAR(gb[i], gb_ref[i], 1e-12);
  }
}

TEST(BatchNormKernelTest, StatsMatchTheDefinitionForBothLayouts) {
  std::mt19937 rng(2);
  for (int64_t inner : {1, 6}) {
    const int64_t outer = 4, c = 3;
    auto x = RandomVector(outer * c * inner, &rng);
    std::vector<double> mean(c), var(c);
    BatchNormStats<double>(x.data(), mean.data(), var.data(), outer, c, inner);
    for (int64_t ch = 0; ch < c; ++ch) {
      double mu = 0, v = 0;
      const double m = static_cast<double>(outer * inner);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) mu += x[(o * c + ch) * inner + i] / m;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const double d = x[(o * c + ch) * inner + i] - mu;
          v += d * d / m;
        }
      EXPECT_NEAR(mean[ch], mu, 1e-12) << "inner=" << inner;
      EXPECT_NEAR(var[ch], v, 1e-12) << "inner=" << inner;
    }
  }
}

TEST(BatchNormKernelTest, TrainingForwardNormalisesAndUpdatesTheRunningStats) {
  std::mt19937 rng(4);
  const int64_t outer = 3, c = 4, inner = 5;
  const double m = outer * inner, momentum = 0.3, eps = 1e-3;
  auto x = RandomVector(outer * c * inner, &rng), w = RandomVector(c, &rng);
  auto b = RandomVector(c, &rng), rm = RandomVector(c, &rng), rv = RandomVector(c, &rng);
  const auto rm0 = rm, rv0 = rv;
  std::vector<double> y(x.size()), mean(c), invstd(c), var(c);
  BatchNormTrainingForward<double>(x.data(), w.data(), b.data(), y.data(), rm.data(), rv.data(),
                                   momentum, eps, mean.data(), invstd.data(), outer, c, inner);
  BatchNormStats<double>(x.data(), mean.data(), var.data(), outer, c, inner);
  for (int64_t ch = 0; ch < c; ++ch) {
    EXPECT_NEAR(invstd[ch], 1 / std::sqrt(var[ch] + eps), 1e-12);
    EXPECT_NEAR(rm[ch], (1 - momentum) * rm0[ch] + momentum * mean[ch], 1e-12);
    EXPECT_NEAR(rv[ch], (1 - momentum) * rv0[ch] + momentum * var[ch] * m / (m - 1), 1e-12);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t e = (o * c + ch) * inner + i;
        EXPECT_NEAR(y[e], (x[e] - mean[ch]) * invstd[ch] * w[ch] + b[ch], 1e-12);
      }
  }
  // Without running stats (and without weight and bias) only y, mean and invstd are written.
  std::vector<double> y2(x.size());
  BatchNormTrainingForward<double>(x.data(), nullptr, nullptr, y2.data(), nullptr, nullptr,
                                   momentum, eps, mean.data(), invstd.data(), outer, c, inner);
  EXPECT_NEAR(y2[7], (x[7] - mean[1]) * invstd[1], 1e-12);
}

TEST(NormKernelTest, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937 rng(3);
  const int64_t rows = 600, n = 700, c = 300;
  auto x = RandomVector(rows * n, &rng), gy = RandomVector(rows * n, &rng);
  auto run = [&](int threads) {
    SetNumThreads(threads);
    std::vector<double> y(x.size()), mean(rows), rstd(rows), gx(x.size()), gw(n), gb(n);
    LayerNormForward<double>(x.data(), nullptr, nullptr, y.data(), mean.data(), rstd.data(), rows,
                             n, 1e-5);
    LayerNormBackward<double>(x.data(), gy.data(), mean.data(), rstd.data(), nullptr, gx.data(),
                              gw.data(), gb.data(), rows, n);
    std::vector<double> bmean(c), bvar(c);
    BatchNormStats<double>(x.data(), bmean.data(), bvar.data(), rows * n / c, c, 1);
    std::vector<double> all = y;
    for (auto* v : {&gx, &gw, &gb, &bmean, &bvar}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const int before = GetNumThreads();
  std::vector<double> one = run(1), three = run(3);
  SetNumThreads(before);
  EXPECT_EQ(one, three);
}

}  // namespace
}  // namespace trainyard::kernels::cpu
