#include "worker/ops/linalg.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/node.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

std::vector<double> Values(const Tensor& t) { return ToVector<double>(t); }

void ExpectAllNear(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  auto va = Values(a), vb = Values(b);
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], tol) << "element " << i;
}

TEST(MatmulGradTest, EveryRankCombinationMatchesFiniteDifferences) {
  Generator gen(1);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5}, {5}},
      {{3, 5}, {5}},
      {{5}, {5, 4}},
      {{3, 5}, {5, 4}},
      {{2, 3, 5}, {5, 4}},
      {{5}, {2, 5, 4}},
      {{2, 3, 5}, {5}},
      {{3, 5}, {2, 5, 4}},
      {{2, 1, 3, 5}, {4, 5, 2}},  // batch dims broadcast: (2, 1) with (4)
  };
  for (auto& [sa, sb] : cases) {
    SCOPED_TRACE(::testing::Message() << sa << " @ " << sb);
    Tensor a = RandLeaf(sa, &gen), b = RandLeaf(sb, &gen);
    EXPECT_GRADCHECK([](auto& in) { return Matmul(in[0], in[1]); }, {a, b});
  }
}

TEST(MatmulGradTest, TransposedAndSlicedViewsGiveTheSameGradients) {
  Generator gen(2);
  Tensor at = RandLeaf({5, 3}, &gen);      // used as its (3, 5) transpose
  Tensor bw = RandLeaf({2, 5, 9}, &gen);   // sliced to (2, 5, 4) with column step 2
  Tensor br = RandLeaf({2, 10, 4}, &gen);  // sliced to (2, 5, 4) with row step 2
  EXPECT_GRADCHECK(
      [](auto& in) { return Matmul(Transpose(in[0], 0, 1), Slice(in[1], 2, 0, 9, 2)); }, {at, bw});
  EXPECT_GRADCHECK(
      [](auto& in) { return Matmul(Transpose(in[0], 0, 1), Slice(in[1], 1, 0, 10, 2)); }, {at, br});
  // Both operands transposed in their last two dims, batched.
  Tensor x = RandLeaf({2, 5, 3}, &gen), y = RandLeaf({2, 4, 5}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Matmul(Transpose(in[0], 1, 2), Transpose(in[1], 1, 2)); },
                   {x, y});
}

TEST(MatmulTest, ValuesMatchHandComputedProducts) {
  Tensor a = FromVector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = FromVector<double>({7, 8, 9, 10, 11, 12}, {3, 2});
  EXPECT_EQ(Values(Matmul(a, b)), (std::vector<double>{58, 64, 139, 154}));
  Tensor u = FromVector<double>({1, 2, 3}), w = FromVector<double>({4, 5, 6});
  Tensor dot = Matmul(u, w);
  EXPECT_EQ(dot.dim(), 0);
  EXPECT_EQ(dot.item(), 32);
  EXPECT_EQ(Values(Matmul(a, w)), (std::vector<double>{32, 77}));  // (2, 3) @ (3)
  EXPECT_EQ(Values(Matmul(FromVector<double>({1, -1}), a)),        // (2) @ (2, 3)
            (std::vector<double>{-3, -3, -3}));
}

TEST(MatmulTest, ResultShapesFollowTorchMatmul) {
  auto shape = [](Shape sa, Shape sb) { return Matmul(Ones(sa), Ones(sb)).shape(); };
  EXPECT_EQ(shape({4}, {4}), Shape{});
  EXPECT_EQ(shape({3, 4}, {4}), Shape{3});
  EXPECT_EQ(shape({4}, {4, 5}), Shape{5});
  EXPECT_EQ(shape({3, 4}, {4, 5}), (Shape{3, 5}));
  EXPECT_EQ(shape({2, 3, 4}, {4}), (Shape{2, 3}));
  EXPECT_EQ(shape({4}, {2, 4, 5}), (Shape{2, 5}));
  EXPECT_EQ(shape({2, 1, 3, 4}, {6, 4, 5}), (Shape{2, 6, 3, 5}));
  EXPECT_EQ(Values(Matmul(Ones({2, 3, 4}), Ones({4, 5})))[0], 4.0);
}

TEST(MatmulTest, BatchedBroadcastMatchesPerBatchProducts) {
  Generator gen(3);
  Tensor a = Randn({2, 1, 3, 4}, Options(DType::kFloat64), &gen);
  Tensor b = Randn({5, 4, 2}, Options(DType::kFloat64), &gen);
  Tensor c = Matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 5, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      Tensor expect = Matmul(Select(Select(a, 0, i), 0, 0), Select(b, 0, j));
      ExpectAllNear(Select(Select(c, 0, i), 0, j), expect, 1e-12);
    }
}

TEST(MatmulTest, ManySmallProductsAndStridedOperandsAgreeWithContiguousCopies) {
  Generator gen(4);
  // 64 products of 5 x 5 (spread over threads), operands transposed and row-sliced.
  Tensor a = Randn({64, 5, 5}, Options(DType::kFloat32), &gen);
  Tensor b = Randn({64, 10, 5}, Options(DType::kFloat32), &gen);
  Tensor at = Transpose(a, 1, 2), bs = Slice(b, 1, 0, 10, 2);
  ExpectAllNear(Matmul(at, bs), Matmul(Contiguous(at), Contiguous(bs)), 1e-5);
  // One large product (parallel inside Gemm) with a column-sliced operand that needs a copy.
  Tensor x = Randn({70, 90}, Options(DType::kFloat32), &gen);
  Tensor y = Randn({90, 130}, Options(DType::kFloat32), &gen);
  Tensor ys = Slice(y, 1, 0, 130, 2);
  ExpectAllNear(Matmul(x, ys), Matmul(x, Contiguous(ys)), 1e-4);
}

TEST(MatmulTest, NodeNamesFollowPyTorch) {
  Tensor v = Ones({3}, TensorOptions().set_requires_grad(true));
  Tensor m = Ones({3, 3}, TensorOptions().set_requires_grad(true));
  Tensor bm = Ones({2, 3, 3}, TensorOptions().set_requires_grad(true));
  EXPECT_STREQ(Matmul(v, v).grad_fn()->name(), "DotBackward0");
  EXPECT_STREQ(Matmul(m, v).grad_fn()->name(), "MvBackward0");
  EXPECT_STREQ(Matmul(m, m).grad_fn()->name(), "MmBackward0");
  EXPECT_STREQ(Matmul(bm, bm).grad_fn()->name(), "BmmBackward0");
}

TEST(MatmulTest, EmptyInnerDimGivesZeros) {
  Tensor c = Matmul(Ones({2, 0}), Ones({0, 3}));
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(ToVector<float>(c), std::vector<float>(6, 0.0f));
}

TEST(MatmulDeathTest, MismatchedInnerSizesNameBothShapes) {
  EXPECT_DEATH(Matmul(Ones({2, 3}), Ones({4, 5})),
               "matmul: shapes \\[2, 3\\] and \\[4, 5\\] cannot be multiplied \\(3 != 4\\)");
  EXPECT_DEATH(Matmul(Ones({2}), Scalar(1)), "matmul: both arguments need at least 1 dim");
}

TEST(LinearTest, AddsTheBiasToXTimesWeightTransposed) {
  Tensor x = FromVector<double>({1, 2, 3, 4}, {2, 2});
  Tensor w = FromVector<double>({1, 0, 1, 1, 2, -1}, {3, 2});  // (out=3, in=2)
  Tensor b = FromVector<double>({10, 20, 30});
  // x @ w^T = [[1, 3, 0], [3, 7, 2]]
  EXPECT_EQ(Values(Linear(x, w, b)), (std::vector<double>{11, 23, 30, 13, 27, 32}));
  EXPECT_EQ(Values(Linear(x, w)), (std::vector<double>{1, 3, 0, 3, 7, 2}));
}

TEST(LinearTest, WithoutBiasMatchesMatmulAndIsRecordedAsMm) {
  Generator gen(5);
  Tensor x = RandLeaf({2, 3, 5}, &gen), w = RandLeaf({4, 5}, &gen), b = RandLeaf({4}, &gen);
  Tensor y = Linear(x, w);
  ExpectAllNear(y, Matmul(x, Transpose(w, 0, 1)), 1e-12);
  EXPECT_STREQ(y.grad_fn()->name(), "MmBackward0");
  EXPECT_STREQ(Linear(x, w, b).grad_fn()->name(), "AddmmBackward0");
}

TEST(LinearGradTest, GradientsForInputWeightAndBiasWithLeadingDims) {
  Generator gen(6);
  Tensor x = RandLeaf({2, 3, 5}, &gen), w = RandLeaf({4, 5}, &gen), b = RandLeaf({4}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Linear(in[0], in[1], in[2]); }, {x, w, b});
  EXPECT_GRADCHECK([](auto& in) { return Linear(in[0], in[1]); }, {x, w});
  Tensor v = RandLeaf({5}, &gen);  // a single input vector
  EXPECT_GRADCHECK([](auto& in) { return Linear(in[0], in[1], in[2]); }, {v, w, b});
}

TEST(LinearGradTest, NonContiguousInputAndTransposedWeight) {
  Generator gen(7);
  Tensor xt = RandLeaf({5, 3}, &gen);  // x = xt^T: (3, 5)
  Tensor wt = RandLeaf({5, 4}, &gen);  // weight = wt^T: (4, 5)
  Tensor b = RandLeaf({4}, &gen);
  EXPECT_GRADCHECK(
      [](auto& in) { return Linear(Transpose(in[0], 0, 1), Transpose(in[1], 0, 1), in[2]); },
      {xt, wt, b});
  Tensor xs = RandLeaf({3, 10}, &gen);  // x = every other column: (3, 5)
  Tensor w = RandLeaf({4, 5}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Linear(Slice(in[0], 1, 0, 10, 2), in[1], in[2]); },
                   {xs, w, b});
}

TEST(LinearDeathTest, MismatchedFeaturesNameTheShapes) {
  EXPECT_DEATH(Linear(Ones({2, 3}), Ones({4, 5})),
               "linear: input shape \\[2, 3\\] must end in in_features 5");
  EXPECT_DEATH(Linear(Ones({2, 5}), Ones({4, 5}), Ones({3})),
               "linear: bias shape \\[3\\] must be \\[4\\]");
}

}  // namespace
}  // namespace trainyard::ops
