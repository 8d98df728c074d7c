#include "worker/nn/pooling.h"

#include <gtest/gtest.h>

#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

TEST(PoolingTest, MaxPoolTakesEachWindowsMaximum) {
  MaxPool2d pool(2);
  Tensor x = FromVector<float>({1, 5, 2, 0, 3, 4, 8, 1, 0, 0, 1, 1, 9, 0, 1, 7}, {1, 1, 4, 4});
  Tensor y = pool.Forward(x);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(ToVector<float>(y), (std::vector<float>{5, 8, 9, 7}));
  EXPECT_EQ(MaxPool2d(3, 1, 1).Forward(Randn({2, 3, 5, 6})).shape(), (Shape{2, 3, 5, 6}));
}

TEST(PoolingTest, AvgPoolAveragesEachWindow) {
  AvgPool2d pool(2);
  Tensor x = FromVector<float>({1, 5, 2, 0, 3, 4, 8, 1, 0, 0, 1, 1, 9, 0, 1, 7}, {1, 4, 4});
  EXPECT_EQ(ToVector<float>(pool.Forward(x)), (std::vector<float>{3.25f, 2.75f, 2.25f, 2.5f}));
}

TEST(PoolingTest, AdaptiveAvgPoolGivesTheRequestedSize) {
  AdaptiveAvgPool2d pool(1);
  Tensor y = pool.Forward(Full({2, 3, 5, 7}, 2.5));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(ToVector<float>(y), std::vector<float>(6, 2.5f));
  EXPECT_EQ(AdaptiveAvgPool2d(2, 3).Forward(Randn({1, 4, 7, 9})).shape(), (Shape{1, 4, 2, 3}));
}

TEST(PoolingTest, FlattenKeepsTheBatchDimByDefault) {
  EXPECT_EQ(Flatten().Forward(Randn({2, 3, 4, 5})).shape(), (Shape{2, 60}));
  EXPECT_EQ(Flatten(0, 1).Forward(Randn({2, 3, 4})).shape(), (Shape{6, 4}));
}

}  // namespace
}  // namespace trainyard::nn
