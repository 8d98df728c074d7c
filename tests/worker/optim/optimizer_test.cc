#include "worker/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "worker/ops/elementwise.h"
#include "worker/optim/adam.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<NamedTensor>, double lr)>;

std::unique_ptr<Optimizer> MakeSgd(std::vector<NamedTensor> p, double lr) {
  SGDOptions o;
  o.lr = lr;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 1e-3;
  return std::move(SGD::Create(std::move(p), o)).value();
}
std::unique_ptr<Optimizer> MakeAdam(std::vector<NamedTensor> p, double lr) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = 0.01;
  return std::move(Adam::Create(std::move(p), o)).value();
}
std::unique_ptr<Optimizer> MakeAdamW(std::vector<NamedTensor> p, double lr) {
  AdamWOptions o;
  o.lr = lr;
  o.beta2 = 0.95;
  return std::move(AdamW::Create(std::move(p), o)).value();
}

// Three parameters; "big" spans several kernel chunks so the threaded path runs too.
std::vector<NamedTensor> MakeParams(uint64_t seed) {
  Generator gen(seed);
  std::vector<NamedTensor> params = {{"layer.0.weight", Randn({7, 5}, {}, &gen)},
                                     {"big", Randn({20011}, {}, &gen)},
                                     {"late", Randn({3}, {}, &gen)}};
  for (auto& [name, t] : params) t.set_requires_grad(true);
  return params;
}

std::vector<NamedTensor> CopyParams(const std::vector<NamedTensor>& params) {
  std::vector<NamedTensor> out;
  for (const auto& [name, t] : params) {
    out.emplace_back(name, ConvertTo(t.detach(), t.dtype(), true).set_requires_grad(true));
  }
  return out;
}

// Gradients for steps [begin, end), drawn from a generator seeded by the step; "late" has none
// before step 4 or at step 12.
void RunSteps(Optimizer& opt, const std::vector<NamedTensor>& params, int begin, int end) {
  for (int t = begin; t < end; ++t) {
    Generator gen(1000 + t);
    for (const auto& [name, p] : params) {
      Tensor g = Randn(p.shape(), {}, &gen);
      p.set_grad(name == "late" && (t < 4 || t == 12) ? Tensor() : g);
    }
    opt.Step();
  }
}

bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor x = ContiguousData(a), y = ContiguousData(b);
  return std::memcmp(x.raw_data(), y.raw_data(), x.numel() * ElementSize(x.dtype())) == 0;
}

void ExpectSameStateDict(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(BitwiseEqual(a[i].second, b[i].second)) << a[i].first;
  }
}

class OptimizerResumeTest : public ::testing::TestWithParam<std::pair<const char*, Factory>> {};

TEST_P(OptimizerResumeTest, ResumingFromAStateDictAtStep10MatchesAnUninterruptedRunBitForBit) {
  const Factory& make = GetParam().second;
  auto straight_params = MakeParams(7);
  auto straight = make(straight_params, 0.01);
  RunSteps(*straight, straight_params, 0, 20);

  auto params = MakeParams(7);
  auto first = make(params, 0.01);
  RunSteps(*first, params, 0, 10);
  const std::vector<NamedTensor> saved_state = first->StateDict();
  const std::vector<NamedTensor> saved_params = CopyParams(params);
  RunSteps(*first, params, 10, 20);  // the saved dict is a snapshot: this must not change it

  auto resumed_params = CopyParams(saved_params);
  auto resumed = make(resumed_params, /*lr=*/123.0);  // the state dict restores lr
  ASSERT_TRUE(resumed->LoadStateDict(saved_state).ok());
  EXPECT_EQ(resumed->lr(), 0.01);
  RunSteps(*resumed, resumed_params, 10, 20);

  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(BitwiseEqual(resumed_params[i].second, straight_params[i].second)) << i;
    EXPECT_TRUE(BitwiseEqual(params[i].second, straight_params[i].second)) << i;
  }
  ExpectSameStateDict(resumed->StateDict(), straight->StateDict());
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerResumeTest,
                         ::testing::Values(std::make_pair("sgd", Factory(MakeSgd)),
                                           std::make_pair("adam", Factory(MakeAdam)),
                                           std::make_pair("adamw", Factory(MakeAdamW))),
                         [](const auto& info) { return std::string(info.param.first); });

TEST(OptimizerTest, StateDictNamesStateByParameterAndHoldsHyperparameters) {
  auto params = MakeParams(1);
  auto adam = MakeAdam(params, 0.25);
  RunSteps(*adam, params, 0, 3);  // "late" has had no gradient yet
  std::vector<std::string> keys;
  for (const auto& [key, t] : adam->StateDict()) keys.push_back(key);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"beta1", "beta2", "big.exp_avg", "big.exp_avg_sq", "big.step",
                                      "eps", "layer.0.weight.exp_avg", "layer.0.weight.exp_avg_sq",
                                      "layer.0.weight.step", "lr", "weight_decay"}));
  for (const auto& [key, t] : adam->StateDict()) {
    if (key == "big.step") {
      EXPECT_EQ(t.dtype(), DType::kInt64);
      EXPECT_EQ(t.item(), 3);
    }
    if (key == "lr") {
      EXPECT_EQ(t.dtype(), DType::kFloat64);
      EXPECT_EQ(t.item(), 0.25);
    }
    if (key == "big.exp_avg") {
      EXPECT_EQ(t.shape(), Shape({20011}));
    }
  }
}

TEST(OptimizerTest, StepSkipsParametersWithoutGradientsAndBumpsTheOthersVersion) {
  auto params = MakeParams(2);
  auto sgd = MakeSgd(params, 0.1);
  const Tensor before = ConvertTo(params[2].second, DType::kFloat32, true);
  const uint32_t version = params[0].second.version();
  params[0].second.set_grad(OnesLike(params[0].second));
  params[1].second.set_grad(OnesLike(params[1].second));
  sgd->Step();
  EXPECT_TRUE(BitwiseEqual(params[2].second, before));
  EXPECT_EQ(sgd->state(2).step, 0);
  EXPECT_TRUE(sgd->state(2).buffers.empty());
  EXPECT_EQ(sgd->state(0).step, 1);
  EXPECT_GT(params[0].second.version(), version);
}

TEST(OptimizerTest, ZeroGradEitherDropsGradientsOrZeroesThemInPlace) {
  auto params = MakeParams(3);
  auto sgd = MakeSgd(params, 0.1);
  for (auto& [name, p] : params) p.set_grad(OnesLike(p));
  const TensorImpl* grad_impl = params[0].second.grad().impl();
  sgd->ZeroGrad(/*set_to_none=*/false);
  EXPECT_EQ(params[0].second.grad().impl(), grad_impl);
  for (float v : ToVector<float>(params[0].second.grad())) EXPECT_EQ(v, 0.0f);
  sgd->ZeroGrad();
  for (auto& [name, p] : params) EXPECT_FALSE(p.grad().defined()) << name;
  sgd->ZeroGrad(false);  // undefined grads stay undefined
  EXPECT_FALSE(params[0].second.grad().defined());
}

TEST(OptimizerTest, SetLrChangesTheNextStep) {
  Tensor w = Zeros({1}).set_requires_grad(true);
  SGDOptions o;
  o.lr = 1;
  auto sgd = std::move(SGD::Create({{"w", w}}, o)).value();
  w.set_grad(Ones({1}));
  sgd->set_lr(0.25);
  EXPECT_EQ(sgd->lr(), 0.25);
  sgd->Step();
  EXPECT_EQ(ToVector<float>(w)[0], -0.25f);
}

TEST(OptimizerTest, BadParameterListsAreErrorsNamingTheParameter) {
  Tensor a = Zeros({2, 3}).set_requires_grad(true);
  Tensor nonleaf = ops::MulScalar(a, 2);
  struct Bad {
    std::vector<NamedTensor> params;
    std::string message;
  };
  const Bad cases[] = {
      {{}, "sgd: the parameter list is empty"},
      {{{"a", a}, {"a", Zeros({1})}}, "sgd: parameter name \"a\" appears twice"},
      {{{"a", a}, {"b", a}}, "sgd: parameter \"b\" is a tensor already listed under another name"},
      {{{"", a}}, "sgd: a parameter has an empty name"},
      {{{"u", Tensor()}}, "sgd: parameter \"u\" is an undefined tensor"},
      {{{"i", Zeros({2}, Options(DType::kInt64))}},
       "sgd: parameter \"i\" is int64; optimizers update float32 or float64 parameters"},
      {{{"t", MakeView(a, {3, 2}, {1, 3}, 0)}},
       "sgd: parameter \"t\" is not contiguous; pass the parameter, not a view"},
      {{{"n", nonleaf}},
       "sgd: parameter \"n\" is not a leaf (it has a grad_fn); pass the parameter"},
  };
  for (const Bad& bad : cases) {
    auto sgd = SGD::Create(bad.params, SGDOptions());
    ASSERT_FALSE(sgd.ok()) << bad.message;
    EXPECT_EQ(sgd.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(sgd.status().message(), bad.message);
  }
}

void SetEntry(std::vector<NamedTensor>& dict, const std::string& key, const Tensor& t) {
  for (auto& [k, v] : dict) {
    if (k == key) {
      v = t;
      return;
    }
  }
  dict.emplace_back(key, t);
}

void EraseEntry(std::vector<NamedTensor>& dict, const std::string& key) {
  for (size_t i = 0; i < dict.size(); ++i) {
    if (dict[i].first == key) dict.erase(dict.begin() + i);
  }
}

TEST(OptimizerTest, LoadStateDictRejectsMismatchedStateWithoutChangingAnything) {
  auto source_params = MakeParams(4);
  auto source = MakeAdam(source_params, 0.01);
  RunSteps(*source, source_params, 0, 5);
  const std::vector<NamedTensor> good = source->StateDict();
  const Tensor f64 = Scalar(0, Options(DType::kFloat64));
  using Edit = std::function<void(std::vector<NamedTensor>&)>;
  const std::pair<Edit, std::string> cases[] = {
      {[](auto& d) { SetEntry(d, "big.exp_avg", Zeros({5})); },
       "adam state: \"big.exp_avg\" is float32 [5] on cpu; parameter \"big\" is float32 [20011] "
       "on cpu"},
      {[](auto& d) { SetEntry(d, "big.exp_avg_sq", Zeros({20011}, Options(DType::kFloat64))); },
       "adam state: \"big.exp_avg_sq\" is float64 [20011] on cpu; parameter \"big\" is float32 "
       "[20011] on cpu"},
      {[](auto& d) { EraseEntry(d, "layer.0.weight.exp_avg_sq"); },
       "adam state: \"layer.0.weight.exp_avg_sq\" is missing"},
      {[](auto& d) { SetEntry(d, "ghost.exp_avg", Zeros({1})); },
       "adam state: \"ghost.exp_avg\" belongs to parameter \"ghost\", which this optimizer "
       "does not have"},
      {[](auto& d) { SetEntry(d, "big.momentum_buffer", Zeros({20011})); },
       "adam state: \"big.momentum_buffer\": \"momentum_buffer\" is not a state of adam under "
       "these hyperparameters (expected exp_avg, exp_avg_sq, step)"},
      {[](auto& d) { SetEntry(d, "beta1", Scalar(1.5, Options(DType::kFloat64))); },
       "adam: beta1 is 1.5; it must be in [0, 1)"},
      {[](auto& d) { SetEntry(d, "lr", Scalar(0.1)); },
       "adam state: \"lr\" must be a one-element float64 tensor"},
      {[](auto& d) { EraseEntry(d, "eps"); },
       "adam state: hyperparameter \"eps\" is missing (is this the state of another optimizer?)"},
      {[&](auto& d) { SetEntry(d, "momentum", f64); },
       "adam state: unknown hyperparameter \"momentum\"; adam has beta1, beta2, eps, lr, "
       "weight_decay"},
      {[](auto& d) { SetEntry(d, "big.step", Scalar(0, Options(DType::kInt64))); },
       "adam state: \"big.step\" is 0; it must be at least 1"},
      {[](auto& d) { d.push_back(d.front()); }, "adam state: \"beta1\" appears twice"},
  };
  auto target_params = MakeParams(5);
  auto target = MakeAdam(target_params, 0.5);
  RunSteps(*target, target_params, 0, 2);
  const std::vector<NamedTensor> before = target->StateDict();
  for (const auto& [edit, message] : cases) {
    std::vector<NamedTensor> dict = good;
    edit(dict);
    Status s = target->LoadStateDict(dict);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(s.message(), message);
    ExpectSameStateDict(target->StateDict(), before);
  }
  EXPECT_TRUE(target->LoadStateDict(good).ok());
  ExpectSameStateDict(target->StateDict(), good);
}

TEST(OptimizerTest, LoadStateDictRejectsAnotherOptimizersState) {
  auto params = MakeParams(6);
  auto sgd = MakeSgd(params, 0.1);
  auto adam = MakeAdam(params, 0.1);
  Status s = adam->LoadStateDict(sgd->StateDict());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("adam state: unknown hyperparameter", 0), 0u) << s;
}

TEST(OptimizerTest, LoadingTheStateOfAFreshOptimizerForgetsPastSteps) {
  auto params = MakeParams(8);
  auto adam = MakeAdam(params, 0.1);
  const std::vector<NamedTensor> fresh = adam->StateDict();
  RunSteps(*adam, params, 0, 2);
  ASSERT_TRUE(adam->LoadStateDict(fresh).ok());
  EXPECT_EQ(adam->state(0).step, 0);
  EXPECT_TRUE(adam->state(0).buffers.empty());
}

}  // namespace
}  // namespace trainyard::optim
