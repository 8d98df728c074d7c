#include "worker/optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/worker/optim/golden_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

using test_util::ExpectReplayMatchesTorch;

TEST(AdamTest, L2WeightDecayMatchesTorchIncludingSkippedSteps) {
  // Parameter 2 has no gradient on steps 0-2 and 7, so its bias corrections use its own count.
  ExpectReplayMatchesTorch("adam_l2", [](std::vector<NamedTensor> p) {
    AdamOptions o;
    o.lr = 0.01;
    o.beta1 = 0.85;
    o.beta2 = 0.995;
    o.eps = 1e-5;
    o.weight_decay = 0.05;
    auto adam = Adam::Create(std::move(p), o);
    EXPECT_TRUE(adam.ok()) << adam.status();
    return adam.ok() ? std::unique_ptr<Optimizer>(std::move(adam).value()) : nullptr;
  });
}

TEST(AdamWTest, DecoupledWeightDecayMatchesTorch) {
  ExpectReplayMatchesTorch("adamw", [](std::vector<NamedTensor> p) {
    AdamWOptions o;
    o.lr = 0.02;
    o.weight_decay = 0.1;
    auto adamw = AdamW::Create(std::move(p), o);
    EXPECT_TRUE(adamw.ok()) << adamw.status();
    return adamw.ok() ? std::unique_ptr<Optimizer>(std::move(adamw).value()) : nullptr;
  });
}

TEST(AdamWTest, LowBeta1AndStrongDecayMatchTorch) {
  ExpectReplayMatchesTorch("adamw_low_beta1", [](std::vector<NamedTensor> p) {
    AdamWOptions o;
    o.lr = 0.003;
    o.beta1 = 0.3;
    o.beta2 = 0.9;
    o.weight_decay = 0.5;
    auto adamw = AdamW::Create(std::move(p), o);
    EXPECT_TRUE(adamw.ok()) << adamw.status();
    return adamw.ok() ? std::unique_ptr<Optimizer>(std::move(adamw).value()) : nullptr;
  });
}

TEST(AdamTest, FirstStepMovesEachWeightByLrAgainstTheGradientSign) {
  // After one step m / (1 - beta1) = g and sqrt(v / (1 - beta2)) = |g|: the step is lr * sign(g)
  // (up to eps), in float64 as in float32.
  Tensor w = FromVector<double>({1.0, 1.0, 1.0}).set_requires_grad(true);
  AdamOptions o;
  o.lr = 0.1;
  o.eps = 0;
  auto adam = Adam::Create({{"w", w}}, o);
  ASSERT_TRUE(adam.ok());
  w.set_grad(FromVector<double>({3.0, -0.5, 1e-3}));
  (*adam)->Step();
  std::vector<double> got = ToVector<double>(w);
  EXPECT_NEAR(got[0], 0.9, 1e-12);
  EXPECT_NEAR(got[1], 1.1, 1e-12);
  EXPECT_NEAR(got[2], 0.9, 1e-12);
}

TEST(AdamWTest, DefaultsAreTorchsAndDecayIsDecoupled) {
  AdamWOptions w;
  EXPECT_EQ(w.lr, 1e-3);
  EXPECT_EQ(w.beta1, 0.9);
  EXPECT_EQ(w.beta2, 0.999);
  EXPECT_EQ(w.eps, 1e-8);
  EXPECT_EQ(w.weight_decay, 0.01);
  EXPECT_EQ(AdamOptions().weight_decay, 0);
  // A zero gradient leaves Adam's weight alone but AdamW still decays it by lr * wd.
  Tensor a = Ones({1}).set_requires_grad(true), b = Ones({1}).set_requires_grad(true);
  AdamOptions ao;
  ao.lr = 0.5;
  ao.weight_decay = 0.2;
  AdamWOptions wo;
  wo.lr = 0.5;
  wo.weight_decay = 0.2;
  auto adam = Adam::Create({{"a", a}}, ao);
  auto adamw = AdamW::Create({{"b", b}}, wo);
  ASSERT_TRUE(adam.ok() && adamw.ok());
  a.set_grad(Zeros({1}));
  b.set_grad(Zeros({1}));
  (*adam)->Step();
  (*adamw)->Step();
  EXPECT_NEAR(ToVector<double>(a)[0], 0.5, 1e-6);  // L2: g = 0.2, a full lr-sized step
  EXPECT_FLOAT_EQ(ToVector<float>(b)[0], 0.9f);    // 1 * (1 - 0.5 * 0.2)
}

TEST(AdamTest, BadHyperparametersAreErrorsNamingTheField) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Bad {
    void (*edit)(AdamOptions&);
    const char* message;
  };
  const Bad cases[] = {
      {[](AdamOptions& o) { o.lr = -1e-3; },
       "adam: lr is -0.001; it must be finite and at least 0"},
      {[](AdamOptions& o) { o.beta1 = 1; }, "adam: beta1 is 1; it must be in [0, 1)"},
      {[](AdamOptions& o) { o.beta1 = -0.1; }, "adam: beta1 is -0.1; it must be in [0, 1)"},
      {[](AdamOptions& o) { o.beta2 = 1.5; }, "adam: beta2 is 1.5; it must be in [0, 1)"},
      {[](AdamOptions& o) { o.eps = -1e-8; }, "adam: eps is -1e-08"},
      {[](AdamOptions& o) { o.weight_decay = -0.01; }, "adam: weight_decay is -0.01"},
  };
  for (const Bad& bad : cases) {
    AdamOptions o;
    bad.edit(o);
    auto adam = Adam::Create({{"w", Zeros({2}).set_requires_grad(true)}}, o);
    ASSERT_FALSE(adam.ok()) << bad.message;
    EXPECT_EQ(adam.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(adam.status().message().rfind(bad.message, 0), 0u) << adam.status();
  }
  AdamWOptions w;
  w.lr = inf;
  auto adamw = AdamW::Create({{"w", Zeros({2}).set_requires_grad(true)}}, w);
  ASSERT_FALSE(adamw.ok());
  EXPECT_EQ(adamw.status().message(), "adamw: lr is inf; it must be finite and at least 0");
}

}  // namespace
}  // namespace trainyard::optim
