#include "worker/nn/mlp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/worker/nn/golden_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Module> Build(const MlpConfig& config, Generator* gen = nullptr) {
  auto model = BuildMlp(config, gen);
  TY_CHECK(model.ok()) << model.status();
  return *model;
}

TEST(MlpTest, StateDictMatchesPyTorch) {
  testing::ExpectStateDictMatchesTorch(*Build(MlpConfig{}), "mlp_default");
  testing::ExpectStateDictMatchesTorch(*Build({{12, 32, 16, 8, 5}, "gelu", 0.1}), "mlp_deep");
}

TEST(MlpTest, ForwardFlattensEachSampleAndReturnsLogits) {
  auto model = Build({{48, 20, 7}, "tanh", 0});
  EXPECT_EQ(model->Forward(Randn({5, 3, 4, 4})).shape(), (Shape{5, 7}));
  EXPECT_EQ(model->Forward(Randn({2, 48})).shape(), (Shape{2, 7}));
}

TEST(MlpTest, ForwardMatchesPyTorch) {
  const auto golden = testing::ParityCase("mlp");
  auto model = Build({{12, 16, 8, 5}, "gelu", 0});
  ASSERT_TRUE(model->LoadStateDict(testing::StateOf(golden)).ok());
  model->Eval();
  Tensor out = model->Forward(golden.at("x"));
  ASSERT_EQ(out.shape(), golden.at("out").shape());
  EXPECT_LE(testing::RelativeError(out, golden.at("out")), 1e-5);
}

TEST(MlpTest, TheSameSeedGivesTheSameModel) {
  Generator a(7), b(7), c(8);
  EXPECT_TRUE(testing::SameState(*Build({}, &a), *Build({}, &b)));
  Generator d(7);
  EXPECT_FALSE(testing::SameState(*Build({}, &d), *Build({}, &c)));
}

TEST(MlpTest, DropoutActsOnlyInTraining) {
  Generator gen(1);
  auto model = Build({{10, 64, 3}, "relu", 0.5}, &gen);
  Tensor x = Randn({4, 10}, {}, &gen);
  EXPECT_NE(ToVector<float>(model->Forward(x)), ToVector<float>(model->Forward(x)));
  model->Eval();
  EXPECT_EQ(ToVector<float>(model->Forward(x)), ToVector<float>(model->Forward(x)));
}

TEST(MlpTest, BackwardReachesEveryParameter) {
  Generator gen(2);
  auto model = Build({{6, 8, 8, 4}, "gelu", 0}, &gen);
  testing::ExpectBackwardReachesEveryParameter(*model, Randn({5, 6}, {}, &gen));
}

TEST(MlpTest, ValidationNamesTheFieldTheValueAndTheRange) {
  struct Case {
    MlpConfig config;
    const char* message;
  };
  const Case cases[] = {
      {{{784}, "relu", 0}, "mlp.sizes has 1 entries; it needs at least 2"},
      {{{784, 0, 10}, "relu", 0}, "mlp.sizes[1] is 0; it must be at least 1"},
      {{{784, 10}, "swish", 0}, "mlp.activation is \"swish\"; it must be \"relu\", \"gelu\""},
      {{{784, 10}, "relu", 1.0}, "mlp.dropout is 1; it must lie in [0, 1)"},
      {{{784, 10}, "relu", -0.1}, "mlp.dropout is -0.1"},
      {{{1000000, 1000000, 10}, "relu", 0}, "parameters; at most 1e+10"},
  };
  for (const Case& c : cases) {
    Status s = Validate(c.config);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_FALSE(BuildMlp(c.config).ok());
  }
}

TEST(MlpTest, CheckInputRejectsTheWrongFeatureCount) {
  auto model = Build(MlpConfig{});
  EXPECT_TRUE(model->CheckInput(Zeros({2, 1, 28, 28})).ok());
  Status s = model->CheckInput(Zeros({2, 3, 32, 32}));
  EXPECT_THAT(s.message(), HasSubstr("input shape is [2, 3, 32, 32]"));
  EXPECT_THAT(s.message(), HasSubstr("784 elements per sample (mlp.sizes[0])"));
  EXPECT_THAT(model->CheckInput(Zeros({2, 784}, Options(DType::kFloat64))).message(),
              HasSubstr("input dtype is float64; it must be float32"));
}

}  // namespace
}  // namespace trainyard::nn
