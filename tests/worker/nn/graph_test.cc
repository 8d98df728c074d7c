// GraphModel (worker/nn/graph.h) beyond what the parity and fuzz tests cover.
#include "worker/nn/graph.h"

#include <gtest/gtest.h>

#include "tests/testing/graph_specs.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

TEST(GraphModelTest, AnInputOfAnotherShapeWithAsManyElementsIsViewedAsTheInputs) {
  // Fashion-MNIST's (B, 1, 28, 28) images into an input of [784].
  StatusOr<std::shared_ptr<Module>> model =
      BuildGraph(trainyard::testing::GraphOf(trainyard::testing::MlpGraphJson({784, 10})));
  ASSERT_TRUE(model.ok()) << model.status();
  const Tensor images = Randn({2, 1, 28, 28});
  EXPECT_TRUE((*model)->CheckInput(images).ok());
  EXPECT_EQ((*model)->Forward(images).shape(), Shape({2, 10}));
  const Status wrong = (*model)->CheckInput(Randn({2, 1, 28, 27}));
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(wrong.message()).find("it must be (B, 784) float32"), std::string::npos)
      << wrong.message();
}

TEST(GraphModelTest, TokenIdsOutsideAnEmbeddingAreRefusedBeforeTheyRun) {
  StatusOr<std::shared_ptr<Module>> model =
      BuildGraph(trainyard::testing::GraphOf(trainyard::testing::GptGraphJson(13, 8, 1, 2, 16)));
  ASSERT_TRUE(model.ok()) << model.status();
  const Status s = (*model)->CheckInput(FromVector<int64_t>({1, 2, 3, 13, 0, 0, 0, 0}, {1, 8}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("token id 13 must lie in [0, 13)"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace trainyard::nn
