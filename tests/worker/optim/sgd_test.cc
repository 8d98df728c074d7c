#include "worker/optim/sgd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/worker/optim/golden_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

using test_util::ExpectReplayMatchesTorch;

std::unique_ptr<Optimizer> MakeSgd(std::vector<NamedTensor> params, const SGDOptions& o) {
  auto sgd = SGD::Create(std::move(params), o);
  EXPECT_TRUE(sgd.ok()) << sgd.status();
  return sgd.ok() ? std::move(sgd).value() : nullptr;
}

std::vector<NamedTensor> OneParam() { return {{"w", Zeros({2, 3}).set_requires_grad(true)}}; }

TEST(SgdTest, PlainStepsMatchTorch) {
  ExpectReplayMatchesTorch("sgd_plain", [](std::vector<NamedTensor> p) {
    SGDOptions o;
    o.lr = 0.1;
    return MakeSgd(std::move(p), o);
  });
}

TEST(SgdTest, MomentumDampeningAndWeightDecayMatchTorchIncludingLateFirstGradients) {
  // Parameter 2 has no gradient on steps 0-2 and 7: its buffer starts as its first gradient.
  ExpectReplayMatchesTorch("sgd_momentum", [](std::vector<NamedTensor> p) {
    SGDOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.dampening = 0.1;
    o.weight_decay = 0.01;
    return MakeSgd(std::move(p), o);
  });
}

TEST(SgdTest, NesterovMatchesTorch) {
  ExpectReplayMatchesTorch("sgd_nesterov", [](std::vector<NamedTensor> p) {
    SGDOptions o;
    o.lr = 0.05;
    o.momentum = 0.8;
    o.nesterov = true;
    o.weight_decay = 0.001;
    return MakeSgd(std::move(p), o);
  });
}

TEST(SgdTest, UpdatesFloat64ParametersWithTheSameRule) {
  Tensor w = FromVector<double>({1.0, -2.0}).set_requires_grad(true);
  SGDOptions o;
  o.lr = 0.5;
  o.momentum = 0.5;
  auto sgd = SGD::Create({{"w", w}}, o);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  w.set_grad(FromVector<double>({0.25, 1.0}));
  (*sgd)->Step();  // buf = g; w -= 0.5 * g
  (*sgd)->Step();  // buf = 0.5 * g + g; w -= 0.5 * buf
  EXPECT_EQ(ToVector<double>(w), (std::vector<double>{1.0 - 0.125 - 0.1875, -2.0 - 0.5 - 0.75}));
}

TEST(SgdTest, OptionsDefaultToTorchDefaults) {
  SGDOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.momentum, 0);
  EXPECT_EQ(o.dampening, 0);
  EXPECT_FALSE(o.nesterov);
  EXPECT_EQ(o.weight_decay, 0);
}

TEST(SgdTest, BadHyperparametersAreErrorsNamingTheField) {
  struct Bad {
    SGDOptions options;
    const char* message;
  };
  auto with = [](auto edit) {
    SGDOptions o;
    edit(o);
    return o;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Bad cases[] = {
      {with([](SGDOptions& o) { o.lr = -0.1; }),
       "sgd: lr is -0.1; it must be finite and at least 0"},
      {with([&](SGDOptions& o) { o.lr = nan; }), "sgd: lr is nan"},
      {with([](SGDOptions& o) { o.momentum = -0.9; }), "sgd: momentum is -0.9"},
      {with([](SGDOptions& o) { o.dampening = 1.5; }),
       "sgd: dampening is 1.5; it must be in [0, 1]"},
      {with([](SGDOptions& o) { o.weight_decay = -1; }), "sgd: weight_decay is -1"},
      {with([](SGDOptions& o) { o.nesterov = true; }),
       "sgd: nesterov needs momentum > 0 and dampening 0; momentum is 0, dampening is 0"},
      {with([](SGDOptions& o) { o.nesterov = true, o.momentum = 0.9, o.dampening = 0.1; }),
       "sgd: nesterov needs momentum > 0 and dampening 0; momentum is 0.9, dampening is 0.1"},
  };
  for (const Bad& bad : cases) {
    auto sgd = SGD::Create(OneParam(), bad.options);
    ASSERT_FALSE(sgd.ok()) << bad.message;
    EXPECT_EQ(sgd.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(sgd.status().message().rfind(bad.message, 0), 0u) << sgd.status();
  }
}

TEST(SgdTest, StateHoldsAMomentumBufferOnlyWithMomentum) {
  for (double momentum : {0.0, 0.9}) {
    SGDOptions o;
    o.momentum = momentum;
    auto params = OneParam();
    auto sgd = SGD::Create(params, o);
    ASSERT_TRUE(sgd.ok());
    params[0].second.set_grad(Ones({2, 3}));
    (*sgd)->Step();
    EXPECT_EQ((*sgd)->state(0).step, 1);
    EXPECT_EQ((*sgd)->state(0).buffers.count("momentum_buffer"), momentum != 0 ? 1u : 0u);
  }
}

TEST(SgdTest, LoadedHyperparametersAreCheckedLikeOptions) {
  auto sgd = SGD::Create(OneParam(), SGDOptions());
  ASSERT_TRUE(sgd.ok());
  std::vector<NamedTensor> state = (*sgd)->StateDict();
  for (auto& [key, t] : state) {
    if (key == "nesterov") t = Scalar(0.5, Options(DType::kFloat64));
  }
  EXPECT_EQ((*sgd)->LoadStateDict(state).message(), "sgd: nesterov is 0.5; it must be 0 or 1");
  for (auto& [key, t] : state) {
    if (key == "nesterov") t = Scalar(1, Options(DType::kFloat64));
  }
  EXPECT_EQ((*sgd)->LoadStateDict(state).message(),
            "sgd: nesterov needs momentum > 0 and dampening 0; momentum is 0, dampening is 0");
  EXPECT_FALSE((*sgd)->options().nesterov);
}

}  // namespace
}  // namespace trainyard::optim
