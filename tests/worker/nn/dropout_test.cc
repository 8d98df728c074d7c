#include "worker/nn/dropout.h"

#include <gtest/gtest.h>

#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

TEST(DropoutTest, TrainingZeroesAboutPAndScalesTheRest) {
  Generator gen(8);
  Dropout drop(0.25, &gen);
  const std::vector<float> y = ToVector<float>(drop.Forward(Ones({4000})));
  int zeros = 0;
  for (float v : y) {
    if (v == 0) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 1 / 0.75f);
    }
  }
  EXPECT_NEAR(zeros / 4000.0, 0.25, 0.03);
}

TEST(DropoutTest, EvalIsTheIdentity) {
  Dropout drop(0.9);
  drop.Eval();
  Tensor x = Randn({50});
  EXPECT_EQ(ToVector<float>(drop.Forward(x)), ToVector<float>(x));
}

TEST(DropoutTest, MasksComeFromTheGivenGenerator) {
  Generator a(3), b(3);
  Dropout da(0.5, &a), db(0.5, &b);
  const std::vector<float> first = ToVector<float>(da.Forward(Ones({64})));
  EXPECT_EQ(first, ToVector<float>(db.Forward(Ones({64}))));
  EXPECT_GT(a.offset(), 0u);
  EXPECT_NE(first, ToVector<float>(da.Forward(Ones({64}))));  // the generator moved on
}

}  // namespace
}  // namespace trainyard::nn
