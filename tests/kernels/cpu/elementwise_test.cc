// The vectorised unary backward kernel and the float GELU against their definitions in double,
// on an odd length (vector body plus remainder).
#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

constexpr int64_t kN = 1003;

std::vector<float> RandomVector(std::mt19937* rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> v(kN);
  for (float& x : v) x = static_cast<float>(dist(*rng));
  return v;
}

// y = f(x) for the ops whose derivative reads the output.
std::vector<float> Forward(UnaryOp op, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  const int64_t n = static_cast<int64_t>(x.size()), stride = 1;
  const int64_t* strides[2] = {&stride, &stride};
  Unary<float>(op, MakeIter(1, &n, 2, strides), y.data(), x.data(), 0.0f, 0.0f);
  return y;
}

TEST(UnaryBackwardKernelTest, EveryOpMatchesItsDerivative) {
  std::mt19937 rng(1);
  const auto x = RandomVector(&rng, 0.2, 3), g = RandomVector(&rng, -1, 1);
  const auto xs = RandomVector(&rng, -3, 3);  // signed inputs for the ops defined everywhere
  const double kInvSqrt2Pi = 0.3989422804014327;
  struct Case {
    UnaryOp op;
    bool positive;  // x in (0.2, 3) rather than (-3, 3)
    std::function<double(double)> grad;
  };
  const std::vector<Case> cases = {
      {UnaryOp::kNeg, false, [](double) { return -1.0; }},
      {UnaryOp::kExp, false, [](double v) { return std::exp(v); }},
      {UnaryOp::kLog, true, [](double v) { return 1 / v; }},
      {UnaryOp::kSqrt, true, [](double v) { return 0.5 / std::sqrt(v); }},
      {UnaryOp::kRsqrt, true, [](double v) { return -0.5 * std::pow(v, -1.5); }},
      {UnaryOp::kAbs, false, [](double v) { return v > 0 ? 1.0 : -1.0; }},
      {UnaryOp::kRelu, false, [](double v) { return v > 0 ? 1.0 : 0.0; }},
      {UnaryOp::kSigmoid, false,
       [](double v) {
         const double s = 1 / (1 + std::exp(-v));
         return s * (1 - s);
       }},
      {UnaryOp::kTanh, false, [](double v) { return 1 - std::tanh(v) * std::tanh(v); }},
      {UnaryOp::kSilu, false,
       [](double v) {
         const double s = 1 / (1 + std::exp(-v));
         return s * (1 + v * (1 - s));
       }},
      {UnaryOp::kGeluErf, false,
       [&](double v) {
         return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-v * v / 2) * kInvSqrt2Pi;
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.op));
    const std::vector<float>& in = c.positive ? x : xs;
    const std::vector<float> y = Forward(c.op, in);
    std::vector<float> gx(kN);
    UnaryBackward<float>(c.op, kN, in.data(), y.data(), g.data(), gx.data(), 0.0f, 0.0f);
    for (int64_t i = 0; i < kN; ++i) {
      const double want = g[i] * c.grad(in[i]);
      ASSERT_NEAR(gx[i], want, 2e-6 * (1 + std::fabs(want))) << "x=" << in[i];
    }
  }
}

TEST(UnaryKernelTest, FloatGeluMatchesTheErfDefinition) {
  std::mt19937 rng(2);
  std::vector<float> x = RandomVector(&rng, -6, 6);
  x.insert(x.end(), {0.0f, -0.0f, 1e-30f, -10.0f, 10.0f, 1e4f, -1e4f});
  const std::vector<float> y = Forward(UnaryOp::kGeluErf, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    ASSERT_NEAR(y[i], want, 3e-7 * (1 + std::fabs(want))) << "x=" << v;
  }
  EXPECT_TRUE(std::isnan(FastErf(NAN)));
  EXPECT_EQ(FastErf(INFINITY), 1.0f);
  EXPECT_EQ(FastErf(-INFINITY), -1.0f);
  for (float v = -5; v <= 5; v += 0.01f) ASSERT_NEAR(FastErf(v), std::erf(v), 2.5e-7) << v;
}

}  // namespace
}  // namespace trainyard::kernels::cpu
