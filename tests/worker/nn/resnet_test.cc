#include "worker/nn/resnet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/worker/nn/golden_util.h"
#include "tests/worker/nn/stats_util.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using ::testing::HasSubstr;
using testing::RelativeError;

std::shared_ptr<Module> Build(const ResNetConfig& config, Generator* gen = nullptr) {
  auto model = BuildResNet(config, gen);
  TY_CHECK(model.ok()) << model.status();
  return *model;
}

// The parity case's config: 3 channels, 5 classes, width 2, blocks {2, 1, 1, 1}.
ResNetConfig Tiny() { return {3, 5, 2, {2, 1, 1, 1}}; }

Tensor StateEntry(const Module& m, const std::string& key) {
  for (const auto& [name, t] : m.StateDict())
    if (name == key) return t;
  ADD_FAILURE() << "no state dict entry " << key;
  return Tensor();
}

TEST(ResNetTest, StateDictMatchesTorchvisionNames) {
  testing::ExpectStateDictMatchesTorch(*Build({3, 10, 16, {2, 2, 2, 2}}), "resnet18_w16");
  testing::ExpectStateDictMatchesTorch(*Build({1, 7, 8, {1, 2, 1, 3}}), "resnet_small");
}

TEST(ResNetTest, ForwardGivesLogitsPerImage) {
  auto model = Build({1, 7, 4, {1, 1, 1, 1}});
  EXPECT_EQ(model->Forward(Randn({2, 1, 12, 9})).shape(), (Shape{2, 7}));
}

TEST(ResNetTest, ConvolutionsUseKaimingNormalFanOut) {
  Generator gen(3);
  auto model = Build({3, 10, 32, {1, 1, 1, 1}}, &gen);
  // layer4.0.conv2: (256, 256, 3, 3), fan_out 256 * 9.
  const auto s = ::trainyard::nn::testing::StatsOf(StateEntry(*model, "layer4.0.conv2.weight"));
  EXPECT_NEAR(s.std, std::sqrt(2.0 / (256 * 9)), 0.01 * std::sqrt(2.0 / (256 * 9)));
  EXPECT_EQ(ToVector<float>(StateEntry(*model, "layer2.0.bn1.weight")), std::vector<float>(64, 1));
}

TEST(ResNetTest, TrainAndEvalForwardsMatchPyTorchIncludingRunningStats) {
  const auto golden = testing::ParityCase("resnet");
  auto model = Build(Tiny());
  ASSERT_TRUE(model->LoadStateDict(testing::StateOf(golden)).ok());
  Tensor out_train = model->Forward(golden.at("x"));
  EXPECT_LE(RelativeError(out_train, golden.at("out_train")), 1e-5);
  for (const char* key : {"bn1.running_mean", "layer2.0.downsample.1.running_var",
                          "layer4.0.bn2.num_batches_tracked"}) {
    SCOPED_TRACE(key);
    EXPECT_LE(RelativeError(StateEntry(*model, key), golden.at(std::string("after.") + key)), 1e-5);
  }
  model->Eval();
  EXPECT_LE(RelativeError(model->Forward(golden.at("x")), golden.at("out_eval")), 1e-5);
}

TEST(ResNetTest, OnlyTrainingUpdatesRunningStats) {
  Generator gen(5);
  auto model = Build(Tiny(), &gen);
  Tensor x = Randn({2, 3, 8, 8}, {}, &gen);
  model->Eval();
  model->Forward(x);
  EXPECT_EQ(ToVector<float>(StateEntry(*model, "bn1.running_mean")), std::vector<float>(2, 0));
  EXPECT_EQ(StateEntry(*model, "layer1.0.bn2.num_batches_tracked").item(), 0);
  model->Train();
  model->Forward(x);
  model->Forward(x);
  EXPECT_NE(ToVector<float>(StateEntry(*model, "bn1.running_mean")), std::vector<float>(2, 0));
  EXPECT_EQ(StateEntry(*model, "layer1.0.bn2.num_batches_tracked").item(), 2);
}

TEST(ResNetTest, TheSameSeedGivesTheSameModel) {
  Generator a(9), b(9), c(10);
  auto first = Build(Tiny(), &a);
  EXPECT_TRUE(testing::SameState(*first, *Build(Tiny(), &b)));
  EXPECT_FALSE(testing::SameState(*first, *Build(Tiny(), &c)));
}

TEST(ResNetTest, BackwardReachesEveryParameter) {
  Generator gen(11);
  auto model = Build(Tiny(), &gen);
  testing::ExpectBackwardReachesEveryParameter(*model, Randn({4, 3, 8, 8}, {}, &gen));
}

TEST(ResNetTest, ValidationNamesTheFieldTheValueAndTheRange) {
  const std::pair<ResNetConfig, const char*> cases[] = {
      {{0, 10, 64, {2, 2, 2, 2}}, "resnet.in_channels is 0; it must be at least 1"},
      {{3, 0, 64, {2, 2, 2, 2}}, "resnet.num_classes is 0"},
      {{3, 10, 0, {2, 2, 2, 2}}, "resnet.base_width is 0"},
      {{3, 10, 64, {2, 2, 2}}, "resnet.blocks has 3 entries; it must have exactly 4"},
      {{3, 10, 64, {2, 0, 2, 2}}, "resnet.blocks[1] is 0; it must be at least 1"},
      {{3, 10, 1 << 20, {2, 2, 2, 2}}, "resnet: the config gives"},
  };
  for (const auto& [config, message] : cases) {
    EXPECT_THAT(Validate(config).message(), HasSubstr(message));
    EXPECT_EQ(BuildResNet(config).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ResNetTest, CheckInputRejectsBatchesTooSmallForBatchNormInTraining) {
  auto model = Build(Tiny());
  EXPECT_TRUE(model->CheckInput(Zeros({2, 3, 8, 8})).ok());
  EXPECT_THAT(model->CheckInput(Zeros({1, 3, 8, 8})).message(),
              HasSubstr("layer4 would see 1x1x1"));
  EXPECT_THAT(model->CheckInput(Zeros({2, 1, 8, 8})).message(),
              HasSubstr("it must be (N, 3, H, W)"));
  model->Eval();
  EXPECT_TRUE(model->CheckInput(Zeros({1, 3, 8, 8})).ok());
}

}  // namespace
}  // namespace trainyard::nn
