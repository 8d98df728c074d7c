#include "worker/optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "worker/autograd/engine.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/loss.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

constexpr uint64_t kSeed = 31;
const float kInf = std::numeric_limits<float>::infinity();

std::unique_ptr<GradScaler> MakeScaler(const GradScalerOptions& o = {}) {
  StatusOr<std::unique_ptr<GradScaler>> s = GradScaler::Create(o);
  TY_CHECK(s.ok()) << s.status();
  return std::move(s).value();
}

std::unique_ptr<SGD> MakeSgd(const std::vector<Tensor>& params) {
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < params.size(); ++i) named.emplace_back("p" + std::to_string(i), params[i]);
  SGDOptions o;
  o.lr = 0.5;
  o.momentum = 0.9;
  return std::move(SGD::Create(std::move(named), o)).value();
}

Tensor Param(std::vector<float> v) {
  Tensor t = FromVector<float>(v);
  t.set_requires_grad(true);
  return t;
}

std::vector<float> Vec(const Tensor& t) { return ToVector<float>(t); }

// A linear classifier's cross-entropy on fixed data; w (3, 4) and b (4) are the parameters.
Tensor ClassifierLoss(const Tensor& w, const Tensor& b) {
  Generator gen(kSeed);
  Tensor x = Randn({5, 3}, {}, &gen);
  Tensor target = FromVector<int64_t>({0, 3, 1, 2, 3});
  return ops::CrossEntropy(ops::Add(ops::Matmul(x, w), b), target);
}

std::vector<Tensor> ClassifierParams() {
  Generator gen(kSeed + 1);
  Tensor w = Randn({3, 4}, {}, &gen).set_requires_grad(true);
  Tensor b = Randn({4}, {}, &gen).set_requires_grad(true);
  return {w, b};
}

TEST(GradScalerTest, DefaultsAreThoseOfTorchAmpGradScaler) {
  std::unique_ptr<GradScaler> s = MakeScaler();
  EXPECT_EQ(s->scale(), 65536.0);
  EXPECT_EQ(s->growth_tracker(), 0);
  EXPECT_EQ(s->options().growth_factor, 2.0);
  EXPECT_EQ(s->options().backoff_factor, 0.5);
  EXPECT_EQ(s->options().growth_interval, 2000);
}

TEST(GradScalerTest, CreateNamesTheBadOption) {
  auto message = [](GradScalerOptions o) {
    return std::string(GradScaler::Create(o).status().message());
  };
  GradScalerOptions o;
  o.init_scale = 0;
  EXPECT_EQ(message(o), "grad_scaler: init_scale is 0; it must be finite and positive");
  o = {};
  o.growth_factor = 1;
  EXPECT_EQ(message(o), "grad_scaler: growth_factor is 1; it must be finite and greater than 1");
  o = {};
  o.backoff_factor = 1;
  EXPECT_EQ(message(o), "grad_scaler: backoff_factor is 1; it must be in (0, 1)");
  o.backoff_factor = std::nan("");
  EXPECT_EQ(message(o), "grad_scaler: backoff_factor is nan; it must be in (0, 1)");
  o = {};
  o.growth_interval = 0;
  EXPECT_EQ(message(o), "grad_scaler: growth_interval is 0; it must be at least 1");
  EXPECT_EQ(GradScaler::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(GradScalerTest, ScaledBackwardThenUnscaleGivesTheTrueGradientsBitForBit) {
  std::vector<Tensor> plain = ClassifierParams();
  ASSERT_TRUE(autograd::Backward(ClassifierLoss(plain[0], plain[1])).ok());

  std::vector<Tensor> scaled = ClassifierParams();
  std::unique_ptr<GradScaler> scaler = MakeScaler();
  Tensor loss = ClassifierLoss(scaled[0], scaled[1]);
  Tensor scaled_loss = scaler->Scale(loss);
  EXPECT_FLOAT_EQ(scaled_loss.item(), loss.item() * 65536);
  ASSERT_TRUE(autograd::Backward(scaled_loss).ok());
  const std::vector<float> before_unscale = Vec(scaled[1].grad());
  EXPECT_FLOAT_EQ(before_unscale[0], Vec(plain[1].grad())[0] * 65536);
  EXPECT_FALSE(scaler->UnscaleAndCheck(scaled));
  // Scaling by a power of two and back is exact while nothing overflows or underflows.
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(Vec(scaled[i].grad()), Vec(plain[i].grad()));
}

TEST(GradScalerTest, UnscaleSkipsUndefinedGradientsAndHandlesFloat64) {
  std::unique_ptr<GradScaler> scaler = MakeScaler({/*init_scale=*/4});
  Tensor a = Param({0, 0});
  Tensor b = Zeros({2}, Options(DType::kFloat64)).set_requires_grad(true);
  Tensor none = Param({1});
  a.set_grad(FromVector<float>({8, -4}));
  b.set_grad(FromVector<double>({2, 1}));
  EXPECT_FALSE(scaler->UnscaleAndCheck({a, b, none}));
  EXPECT_EQ(Vec(a.grad()), (std::vector<float>{2, -1}));
  EXPECT_EQ(ToVector<double>(b.grad()), (std::vector<double>{0.5, 0.25}));
  EXPECT_FALSE(none.grad().defined());
}

TEST(GradScalerTest, StepSkipsTheOptimizerWhenAGradientIsInf) {
  Tensor a = Param({1, 2});
  Tensor b = Param({3});
  std::unique_ptr<SGD> sgd = MakeSgd({a, b});
  std::unique_ptr<GradScaler> scaler = MakeScaler();
  a.set_grad(FromVector<float>({1, 1}));
  b.set_grad(FromVector<float>({kInf}));
  EXPECT_FALSE(scaler->Step(*sgd, {a, b}));
  EXPECT_EQ(Vec(a), (std::vector<float>{1, 2}));
  EXPECT_EQ(Vec(b), (std::vector<float>{3}));
  EXPECT_EQ(sgd->state(0).step, 0) << "a skipped step must leave the optimizer state alone";
  EXPECT_TRUE(sgd->state(0).buffers.empty());
}

TEST(GradScalerTest, StepSkipsTheOptimizerWhenAGradientIsNaN) {
  Tensor a = Param({1, 2});
  std::unique_ptr<SGD> sgd = MakeSgd({a});
  std::unique_ptr<GradScaler> scaler = MakeScaler();
  a.set_grad(FromVector<float>({std::nanf(""), 0}));
  EXPECT_FALSE(scaler->Step(*sgd, {a}));
  EXPECT_EQ(Vec(a), (std::vector<float>{1, 2}));
  EXPECT_EQ(sgd->state(0).step, 0);
}

TEST(GradScalerTest, StepWithFiniteGradientsUpdatesWithTheUnscaledGradients) {
  Tensor a = Param({1, 2});
  std::unique_ptr<SGD> sgd = MakeSgd({a});
  std::unique_ptr<GradScaler> scaler = MakeScaler();
  a.set_grad(FromVector<float>({65536, -131072}));  // scale x {1, -2}
  EXPECT_TRUE(scaler->Step(*sgd, {a}));
  EXPECT_EQ(Vec(a), (std::vector<float>{1 - 0.5f * 1, 2 - 0.5f * -2}));
  EXPECT_EQ(sgd->state(0).step, 1);
}

TEST(GradScalerTest, StepAfterUnscaleAndCheckDoesNotDivideAgain) {
  Tensor a = Param({0});
  std::unique_ptr<SGD> sgd = MakeSgd({a});
  std::unique_ptr<GradScaler> scaler = MakeScaler({/*init_scale=*/8});
  a.set_grad(FromVector<float>({16}));
  EXPECT_FALSE(scaler->UnscaleAndCheck({a}));
  EXPECT_EQ(Vec(a.grad()), (std::vector<float>{2}));  // what a clip would see
  EXPECT_TRUE(scaler->Step(*sgd, {a}));
  EXPECT_EQ(Vec(a), (std::vector<float>{-1}));  // 0 - 0.5 * 2
}

TEST(GradScalerTest, UnscalingTwiceBeforeUpdateIsABug) {
  Tensor a = Param({0});
  a.set_grad(FromVector<float>({1}));
  std::unique_ptr<GradScaler> scaler = MakeScaler();
  scaler->UnscaleAndCheck({a});
  EXPECT_DEATH(scaler->UnscaleAndCheck({a}), "called twice since the last Update");
  scaler->Update(false);
  EXPECT_FALSE(scaler->UnscaleAndCheck({a}));  // a new step
}

TEST(GradScalerTest, AnInfHalvesTheScaleAndRestartsTheGrowthCount) {
  GradScalerOptions o;
  o.growth_interval = 3;
  std::unique_ptr<GradScaler> scaler = MakeScaler(o);
  scaler->Update(false);
  scaler->Update(false);
  EXPECT_EQ(scaler->growth_tracker(), 2);
  scaler->Update(true);
  EXPECT_EQ(scaler->scale(), 32768.0);
  EXPECT_EQ(scaler->growth_tracker(), 0);
  scaler->Update(true);
  EXPECT_EQ(scaler->scale(), 16384.0);
  // Two finite steps after the inf are not yet three in a row.
  scaler->Update(false);
  scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 16384.0);
}

TEST(GradScalerTest, TheScaleGrowsAfterGrowthIntervalConsecutiveFiniteSteps) {
  GradScalerOptions o;
  o.growth_interval = 3;
  std::unique_ptr<GradScaler> scaler = MakeScaler(o);
  scaler->Update(false);
  scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 65536.0);
  scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 131072.0);
  EXPECT_EQ(scaler->growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 262144.0);
}

TEST(GradScalerTest, TheScaleStopsGrowingBeforeFloat32Overflows) {
  GradScalerOptions o;
  o.init_scale = std::ldexp(1.0, 127);
  o.growth_interval = 1;
  std::unique_ptr<GradScaler> scaler = MakeScaler(o);
  scaler->Update(false);
  EXPECT_EQ(scaler->scale(), std::ldexp(1.0, 127));
  EXPECT_EQ(scaler->growth_tracker(), 0);
}

TEST(GradScalerTest, StateDictRoundTripsSoAResumedRunGrowsAtTheSameStep) {
  GradScalerOptions o;
  o.growth_interval = 4;
  std::unique_ptr<GradScaler> a = MakeScaler(o);
  a->Update(true);
  a->Update(false);
  a->Update(false);
  const std::vector<NamedTensor> state = a->StateDict();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "growth_tracker");
  EXPECT_EQ(state[0].second.dtype(), DType::kInt64);
  EXPECT_EQ(state[1].first, "scale");
  EXPECT_EQ(state[1].second.dtype(), DType::kFloat64);

  std::unique_ptr<GradScaler> b = MakeScaler(o);
  ASSERT_TRUE(b->LoadStateDict(state).ok());
  EXPECT_EQ(b->scale(), 32768.0);
  EXPECT_EQ(b->growth_tracker(), 2);
  for (GradScaler* s : {a.get(), b.get()}) {
    s->Update(false);
    EXPECT_EQ(s->scale(), 32768.0);
    s->Update(false);
    EXPECT_EQ(s->scale(), 65536.0);
  }
}

TEST(GradScalerTest, LoadStateDictRejectsBadStateAndChangesNothing) {
  std::unique_ptr<GradScaler> s = MakeScaler();
  auto load = [&](std::vector<NamedTensor> state) {
    Status st = s->LoadStateDict(state);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return std::string(st.message());
  };
  const Tensor tracker = Scalar(3, Options(DType::kInt64));
  const Tensor scale = Scalar(8, Options(DType::kFloat64));
  EXPECT_EQ(load({{"scale", scale}}), "grad_scaler state: \"growth_tracker\" is missing");
  EXPECT_EQ(load({{"scale", scale}, {"growth_tracker", tracker}, {"lr", scale}}),
            "grad_scaler state: unknown entry \"lr\"; a grad scaler has growth_tracker, scale");
  EXPECT_EQ(load({{"scale", Scalar(8)}, {"growth_tracker", tracker}}),
            "grad_scaler state: \"scale\" must be a one-element float64 tensor");
  EXPECT_EQ(load({{"scale", Scalar(-1, Options(DType::kFloat64))}, {"growth_tracker", tracker}}),
            "grad_scaler state: \"scale\" is -1; it must be finite and positive");
  EXPECT_EQ(load({{"scale", scale}, {"growth_tracker", Scalar(-2, Options(DType::kInt64))}}),
            "grad_scaler state: \"growth_tracker\" is -2; it must be at least 0");
  EXPECT_EQ(s->scale(), 65536.0);
  EXPECT_EQ(s->growth_tracker(), 0);
}

}  // namespace
}  // namespace trainyard::optim
