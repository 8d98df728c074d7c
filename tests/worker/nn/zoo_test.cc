#include "worker/nn/zoo.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard::nn {
namespace {

using ::testing::HasSubstr;

TEST(ZooTest, BuildsEachModelByNameFromItsOwnConfig) {
  ModelConfigs configs;
  configs.mlp.sizes = {4, 3};
  configs.cnn = {1, 8, 3, 2, 2, 4, 0};
  configs.resnet = {1, 3, 2, {1, 1, 1, 1}};
  configs.gpt = {11, 8, 1, 2, 8, 0, true};
  const std::pair<const char*, const char*> expected[] = {
      {"mlp", "MLP"}, {"cnn", "CNN"}, {"resnet", "ResNet"}, {"gpt", "GPT"}};
  for (const auto& [name, type] : expected) {
    SCOPED_TRACE(name);
    auto model = BuildModel(name, configs);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->type_name(), type);
    EXPECT_TRUE((*model)->is_training());
  }
  EXPECT_EQ(ModelNames(), (std::vector<std::string>{"mlp", "cnn", "resnet", "gpt"}));
}

TEST(ZooTest, OnlyTheSelectedConfigIsValidated) {
  ModelConfigs configs;
  configs.mlp.sizes = {4, 3};
  configs.gpt.n_head = 0;
  EXPECT_TRUE(BuildModel("mlp", configs).ok());
  EXPECT_THAT(BuildModel("gpt", configs).status().message(), HasSubstr("gpt.n_head is 0"));
}

TEST(ZooTest, AnUnknownNameListsTheKnownOnes) {
  Status s = BuildModel("vit", ModelConfigs{}).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "model \"vit\" is not in the zoo; it must be one of \"mlp\", \"cnn\", \"resnet\", "
            "\"gpt\"");
}

TEST(ZooTest, TheGeneratorFixesTheWeights) {
  ModelConfigs configs;
  configs.mlp.sizes = {5, 4, 2};
  Generator a(42), b(42);
  auto first = BuildModel("mlp", configs, &a);
  auto second = BuildModel("mlp", configs, &b);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(ToVector<float>((*first)->Parameters()[0]),
            ToVector<float>((*second)->Parameters()[0]));
}

}  // namespace
}  // namespace trainyard::nn
