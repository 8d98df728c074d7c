#include "worker/ops/indexing.h"

#include <gtest/gtest.h>

#include "tests/testing/gradcheck.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

TEST(IndexingGradTest, CatStackAndSplit) {
  Generator gen(31);
  Tensor a = RandLeaf({2, 3}, &gen);
  Tensor b = RandLeaf({2, 5}, &gen);
  Tensor c = RandLeaf({2, 3}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Cat({in[0], in[1]}, 1); }, {a, b});
  EXPECT_GRADCHECK(
      [](auto& in) {
        return Cat({Transpose(in[0], 0, 1), in[1]}, 0);
      },
      {c, RandLeaf({4, 2}, &gen)});
  EXPECT_GRADCHECK([](auto& in) { return Stack({in[0], in[1]}, 1); }, {a, c});
  EXPECT_GRADCHECK(
      [](auto& in) {
        auto parts = Split(in[0], 2, 1);  // widths 2, 2, 1
        return Cat({parts[2], parts[0]}, 1);
      },
      {b});
  // Cat's backward hands the pieces views lying as one array, in order: Split takes it whole.
  EXPECT_GRADCHECK(
      [](auto& in) {
        auto parts = Split(Mul(in[0], in[0]), 2, 1);
        return Mul(Cat({parts[0], parts[1], parts[2]}, 1), Transpose(in[1], 0, 1));
      },
      {b, RandLeaf({5, 2}, &gen)});
}

TEST(IndexingGradTest, GatherScatterIndexSelectMaskedFillEmbedding) {
  Generator gen(32);
  Tensor x = RandLeaf({3, 4}, &gen);
  Tensor idx = FromVector<int64_t>({0, 3, 3, 1, 2, 2}, {3, 2});
  EXPECT_GRADCHECK([&](auto& in) { return Gather(in[0], 1, idx); }, {x});
  Tensor src = RandLeaf({3, 2}, &gen);
  EXPECT_GRADCHECK([&](auto& in) { return ScatterAdd(in[0], 1, idx, in[1]); }, {x, src});
  Tensor rows = FromVector<int64_t>({2, 0, 2});
  EXPECT_GRADCHECK([&](auto& in) { return IndexSelect(in[0], 0, rows); }, {x});
  EXPECT_GRADCHECK([&](auto& in) { return IndexSelect(in[0], 1, rows); }, {x});
  EXPECT_GRADCHECK([&](auto& in) { return IndexSelect(Transpose(in[0], 0, 1), 1, rows); }, {x});
  Tensor mask = FromVector<uint8_t>({1, 0, 0, 1}, {1, 4});
  EXPECT_GRADCHECK([&](auto& in) { return MaskedFill(in[0], mask, -2.0); }, {x});
  Tensor tokens = FromVector<int64_t>({1, 1, 0, 2}, {2, 2});
  EXPECT_GRADCHECK([&](auto& in) { return Embedding(in[0], tokens); }, {x});
}

TEST(IndexingTest, ValuesOfGatherOneHotAndEmbedding) {
  Tensor x = FromVector<float>({10, 11, 12, 20, 21, 22}, {2, 3});
  Tensor g = Gather(x, 1, FromVector<int64_t>({2, 0}, {2, 1}));
  EXPECT_EQ(ToVector<float>(g), (std::vector<float>{12, 20}));
  EXPECT_EQ(ToVector<int64_t>(OneHot(FromVector<int64_t>({2, 0}), 3)),
            (std::vector<int64_t>{0, 0, 1, 1, 0, 0}));
  Tensor e = Embedding(x, FromVector<int64_t>({1, 1, 0}));
  EXPECT_EQ(e.shape(), (Shape{3, 3}));
  EXPECT_EQ(ToVector<float>(e)[3], 20.0f);
  Tensor w = x.detach();
  w.set_requires_grad(true);
  ASSERT_TRUE(autograd::Backward(Sum(Embedding(w, FromVector<int64_t>({1, 1, 0})))).ok());
  EXPECT_EQ(ToVector<float>(w.grad()), (std::vector<float>{1, 1, 1, 2, 2, 2}));
}

TEST(IndexingDeathTest, OutOfRangeIndicesNameTheIndexAndTheSize) {
  Tensor x = Zeros({2, 3});
  EXPECT_DEATH(Gather(x, 1, FromVector<int64_t>({5, 0}, {2, 1})),
               "gather: index 5 is out of range for dim 1 of size 3");
  EXPECT_DEATH(Embedding(x, FromVector<int64_t>({-1})), "embedding: index -1 is out of range");
  EXPECT_DEATH(Cat({Zeros({2, 3}), Zeros({3, 3})}, 1), "cat: tensor 1 has shape \\[3, 3\\]");
}

}  // namespace
}  // namespace trainyard::ops
