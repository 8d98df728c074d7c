#include "worker/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/engine.h"
#include "worker/ops/activation.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::Fn;
using testing::RandLeaf;

TEST(ElementwiseGradTest, BinaryOpsWithBroadcasting) {
  Generator gen(1);
  Tensor a = RandLeaf({3, 1, 5}, &gen);
  Tensor b = RandLeaf({4, 1}, &gen);
  Tensor pos = RandLeaf({4, 5}, &gen, 0.5, 2.0);
  EXPECT_GRADCHECK([](auto& in) { return Add(in[0], in[1], 0.7); }, {a, b});
  EXPECT_GRADCHECK([](auto& in) { return Sub(in[0], in[1], 1.3); }, {a, b});
  EXPECT_GRADCHECK([](auto& in) { return Mul(in[0], in[1]); }, {a, b});
  EXPECT_GRADCHECK([](auto& in) { return Div(in[0], in[1]); }, {a, pos});
  EXPECT_GRADCHECK([](auto& in) { return Maximum(in[0], in[1]); }, {a, b});
  EXPECT_GRADCHECK([](auto& in) { return Minimum(in[0], in[1]); }, {a, b});
  EXPECT_GRADCHECK([](auto& in) { return Pow(in[0], in[1]); }, {pos, b});
}

TEST(ElementwiseGradTest, UnaryOpsOnNonContiguousInputs) {
  Generator gen(2);
  Tensor x = RandLeaf({5, 3}, &gen);
  Tensor pos = RandLeaf({5, 3}, &gen, 0.3, 2.0);
  auto t = [](const Tensor& v) { return Transpose(v, 0, 1); };  // a strided view
  std::vector<std::pair<const char*, Fn>> fns = {
      {"neg", [&](auto& in) { return Neg(t(in[0])); }},
      {"exp", [&](auto& in) { return Exp(t(in[0])); }},
      {"log", [&](auto& in) { return Log(t(in[1])); }},
      {"sqrt", [&](auto& in) { return Sqrt(t(in[1])); }},
      {"rsqrt", [&](auto& in) { return Rsqrt(t(in[1])); }},
      {"abs", [&](auto& in) { return Abs(t(in[0])); }},
      {"pow", [&](auto& in) { return Pow(t(in[1]), 2.5); }},
      {"pow2", [&](auto& in) { return Pow(t(in[0]), 2.0); }},
      {"clamp", [&](auto& in) { return Clamp(t(in[0]), -0.5, 0.4); }},
      {"scalar", [&](auto& in) { return AddScalar(MulScalar(t(in[0]), 3.0), 1.5); }},
      {"relu", [&](auto& in) { return Relu(t(in[0])); }},
      {"gelu", [&](auto& in) { return Gelu(t(in[0])); }},
      {"gelu_tanh", [&](auto& in) { return Gelu(t(in[0]), "tanh"); }},
      {"sigmoid", [&](auto& in) { return Sigmoid(t(in[0])); }},
      {"tanh", [&](auto& in) { return Tanh(t(in[0])); }},
      {"silu", [&](auto& in) { return Silu(t(in[0])); }},
  };
  for (auto& [name, f] : fns) {
    SCOPED_TRACE(name);
    EXPECT_GRADCHECK(f, {x, pos});
  }
}

TEST(ElementwiseGradTest, WhereRoutesGradientsByCondition) {
  Generator gen(3);
  Tensor a = RandLeaf({2, 3}, &gen);
  Tensor b = RandLeaf({3}, &gen);
  Tensor cond = FromVector<uint8_t>({1, 0, 1, 0, 0, 1}, {2, 3});
  EXPECT_GRADCHECK([&](auto& in) { return Where(cond, in[0], in[1]); }, {a, b});
}

TEST(ElementwiseTest, PowExponentGradientAtZeroBaseFollowsPyTorch) {
  // d(x^y)/dy = x^y log x: 0 at x = 0 when y >= 0, and inf * -inf = -inf when y < 0.
  Tensor x = FromVector<double>({0, 0, 2});
  Tensor y = FromVector<double>({2, -1, 1});
  y.set_requires_grad(true);
  ASSERT_TRUE(autograd::Backward(Sum(Pow(x, y))).ok());
  std::vector<double> g = ToVector<double>(y.grad());
  EXPECT_EQ(g[0], 0.0);
  EXPECT_EQ(g[1], -INFINITY);  // as torch
  EXPECT_NEAR(g[2], 2 * std::log(2.0), 1e-12);
}

TEST(ElementwiseTest, BroadcastShapesFollowNumpy) {
  Tensor a = Ones({3, 1, 5});
  Tensor b = Full({4, 1}, 2.0);
  Tensor c = Add(a, b);
  EXPECT_EQ(c.shape(), (Shape{3, 4, 5}));
  for (float v : ToVector<float>(c)) EXPECT_EQ(v, 3.0f);
}

TEST(ElementwiseTest, ComparisonsGiveBools) {
  Tensor a = FromVector<float>({1, 2, 3});
  Tensor b = FromVector<float>({2, 2, 2});
  EXPECT_EQ(ToVector<uint8_t>(Lt(a, b)), (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ(ToVector<uint8_t>(Eq(a, b)), (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(ToVector<uint8_t>(Ge(a, b)), (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(Lt(a, b).dtype(), DType::kBool);
}

TEST(ElementwiseTest, FastExpAndTanhMatchTheLibraryOverTheirRange) {
  std::vector<float> xs;
  for (float v = -100.f; v <= 90.f; v += 0.37f) xs.push_back(v);
  xs.push_back(-std::numeric_limits<float>::infinity());
  Tensor x = FromVector<float>(xs);
  std::vector<float> e = ToVector<float>(Exp(x));
  std::vector<float> t = ToVector<float>(Tanh(x));
  for (size_t i = 0; i < xs.size(); ++i) {
    float ref = std::exp(xs[i]);
    if (std::isinf(ref)) {
      EXPECT_TRUE(std::isinf(e[i])) << xs[i];
    } else {
      EXPECT_NEAR(e[i], ref, 3e-7f * ref + 1e-38f) << xs[i];
    }
    EXPECT_NEAR(t[i], std::tanh(xs[i]), 2e-7f) << xs[i];
  }
  EXPECT_TRUE(std::isnan(ToVector<float>(Exp(FromVector<float>({NAN})))[0]));
}

TEST(ElementwiseTest, InPlaceOpsBumpTheVersion) {
  Tensor a = Zeros({3});
  uint32_t v0 = a.version();
  AddScalarInPlace(a, 2);
  MulScalarInPlace(a, 3);
  AddInPlace(a, Ones({3}), 0.5);
  EXPECT_EQ(ToVector<float>(a), (std::vector<float>{6.5f, 6.5f, 6.5f}));
  EXPECT_EQ(a.version(), v0 + 3);
}

TEST(ElementwiseDeathTest, InPlaceOnATensorThatRequiresGradIsAnError) {
  Tensor w = Ones({2}, TensorOptions().set_requires_grad(true));
  EXPECT_DEATH(AddScalarInPlace(w, 1), "requires grad cannot be modified in place");
}

TEST(ElementwiseDeathTest, InPlaceOperandsMustBroadcastToSelfAndNeedNoGrad) {
  EXPECT_DEATH(AddInPlace(Zeros({3}), Ones({2, 3})), "add_: shape \\[2, 3\\] does not broadcast");
  Tensor w = Ones({3}, TensorOptions().set_requires_grad(true));
  EXPECT_DEATH(AddInPlace(Zeros({3}), w), "the operand requires grad");
  AddInPlace(Zeros({2, 3}), Ones({3}));  // broadcasting other to self is fine
}

TEST(ElementwiseDeathTest, IncompatibleShapesNameBothShapes) {
  EXPECT_DEATH(Add(Ones({2, 3}), Ones({4})),
               "add: shapes \\[2, 3\\] and \\[4\\] cannot be broadcast");
}

}  // namespace
}  // namespace trainyard::ops
