#include "worker/nn/cnn.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/worker/nn/golden_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Module> Build(const CnnConfig& config, Generator* gen = nullptr) {
  auto model = BuildCnn(config, gen);
  TY_CHECK(model.ok()) << model.status();
  return *model;
}

// in 2, 8x8 images, 4 classes, channels 3 and 5, hidden 6 (the parity case's config).
CnnConfig Tiny(double dropout = 0.25) { return {2, 8, 4, 3, 5, 6, dropout}; }

TEST(CnnTest, StateDictMatchesPyTorch) {
  testing::ExpectStateDictMatchesTorch(*Build(CnnConfig{}), "cnn_default");
  testing::ExpectStateDictMatchesTorch(*Build({3, 32, 100, 16, 32, 64, 0.5}), "cnn_rgb");
}

TEST(CnnTest, ForwardGivesLogitsPerImage) {
  auto model = Build({3, 10, 7, 4, 6, 8, 0});  // 10 -> 5 -> 2 after the poolings
  EXPECT_EQ(model->Forward(Randn({3, 3, 10, 10})).shape(), (Shape{3, 7}));
}

TEST(CnnTest, ForwardMatchesPyTorch) {
  const auto golden = testing::ParityCase("cnn");
  auto model = Build(Tiny());
  ASSERT_TRUE(model->LoadStateDict(testing::StateOf(golden)).ok());
  model->Eval();
  Tensor out = model->Forward(golden.at("x"));
  ASSERT_EQ(out.shape(), golden.at("out").shape());
  EXPECT_LE(testing::RelativeError(out, golden.at("out")), 1e-5);
}

TEST(CnnTest, TheSameSeedGivesTheSameModel) {
  Generator a(4), b(4), c(5);
  auto first = Build(Tiny(), &a);
  EXPECT_TRUE(testing::SameState(*first, *Build(Tiny(), &b)));
  EXPECT_FALSE(testing::SameState(*first, *Build(Tiny(), &c)));
}

TEST(CnnTest, DropoutActsOnlyInTraining) {
  Generator gen(6);
  auto model = Build({2, 8, 4, 3, 5, 64, 0.5}, &gen);
  Tensor x = Randn({2, 2, 8, 8}, {}, &gen);
  EXPECT_NE(ToVector<float>(model->Forward(x)), ToVector<float>(model->Forward(x)));
  model->Eval();
  EXPECT_EQ(ToVector<float>(model->Forward(x)), ToVector<float>(model->Forward(x)));
}

TEST(CnnTest, BackwardReachesEveryParameter) {
  Generator gen(7);
  auto model = Build(Tiny(0), &gen);
  testing::ExpectBackwardReachesEveryParameter(*model, Randn({4, 2, 8, 8}, {}, &gen));
}

TEST(CnnTest, ValidationNamesTheFieldTheValueAndTheRange) {
  const std::pair<CnnConfig, const char*> cases[] = {
      {{0, 28, 10, 32, 64, 128, 0.25}, "cnn.in_channels is 0; it must be at least 1"},
      {{1, 3, 10, 32, 64, 128, 0.25}, "cnn.image_size is 3; it must be at least 4"},
      {{1, 28, 0, 32, 64, 128, 0.25}, "cnn.num_classes is 0"},
      {{1, 28, 10, -1, 64, 128, 0.25}, "cnn.channels1 is -1"},
      {{1, 28, 10, 32, 0, 128, 0.25}, "cnn.channels2 is 0"},
      {{1, 28, 10, 32, 64, 0, 0.25}, "cnn.hidden is 0"},
      {{1, 28, 10, 32, 64, 128, 2}, "cnn.dropout is 2; it must lie in [0, 1)"},
      {{1, 4096, 10, 32, 4096, 4096, 0}, "cnn: the config gives"},
  };
  for (const auto& [config, message] : cases) {
    EXPECT_THAT(Validate(config).message(), HasSubstr(message));
    EXPECT_EQ(BuildCnn(config).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(CnnTest, CheckInputNamesTheExpectedImageShape) {
  auto model = Build(CnnConfig{});
  EXPECT_TRUE(model->CheckInput(Zeros({2, 1, 28, 28})).ok());
  EXPECT_THAT(model->CheckInput(Zeros({2, 3, 28, 28})).message(),
              HasSubstr("input shape is [2, 3, 28, 28]; it must be (N, 1, 28, 28)"));
}

}  // namespace
}  // namespace trainyard::nn
