#include "worker/ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/engine.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

TEST(AttentionTest, WeighsValuesBySoftmaxOfScaledScores) {
  // One query, two keys, E = 4 so the default scale is 1/2: scores [0, 2 ln 3] / 2 = [0, ln 3],
  // weights [1/4, 3/4].
  const double a = std::log(3.0);
  Tensor q = FromVector<double>({1, 1, 0, 0}, {1, 4});
  Tensor k = FromVector<double>({0, 0, 0, 0, a, a, 0, 0}, {2, 4});
  Tensor v = FromVector<double>({4, 0, 8, 1}, {2, 2});
  std::vector<double> out = ToVector<double>(ScaledDotProductAttention(q, k, v));
  EXPECT_NEAR(out[0], 0.25 * 4 + 0.75 * 8, 1e-12);
  EXPECT_NEAR(out[1], 0.75, 1e-12);
  // An explicit scale replaces 1 / sqrt(E): scale 1 gives scores [0, 2 ln 3], weights [1/10, 9/10].
  out = ToVector<double>(ScaledDotProductAttention(q, k, v, false, Tensor(), 1.0));
  EXPECT_NEAR(out[0], 0.1 * 4 + 0.9 * 8, 1e-12);
}

TEST(AttentionTest, CausalMaskBlocksTheFuture) {
  Generator gen(1);
  Tensor q = Randn({2, 4, 3}, Options(DType::kFloat64), &gen);
  Tensor k = Randn({2, 4, 3}, Options(DType::kFloat64), &gen);
  Tensor v = Randn({2, 4, 5}, Options(DType::kFloat64), &gen);
  Tensor out = ScaledDotProductAttention(q, k, v, /*is_causal=*/true);
  // Changing the last key and value changes only the last query's output.
  Tensor k2 = Clone(k), v2 = Clone(v);
  CopyInto(Select(k2, 1, 3), Full({2, 3}, 9.0, Options(DType::kFloat64)));
  CopyInto(Select(v2, 1, 3), Full({2, 5}, -9.0, Options(DType::kFloat64)));
  Tensor out2 = ScaledDotProductAttention(q, k2, v2, true);
  std::vector<double> a = ToVector<double>(out), b = ToVector<double>(out2);
  for (int64_t batch = 0; batch < 2; ++batch)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        const int64_t o = (batch * 4 + i) * 5 + j;
        if (i < 3) {
          EXPECT_EQ(a[o], b[o]) << "query " << i << " saw a future key";
        } else {
          EXPECT_NE(a[o], b[o]);
        }
      }
  // The first query sees only the first key: its output is the first value.
  EXPECT_EQ(ToVector<double>(Select(Select(out, 0, 0), 0, 0)),
            ToVector<double>(Select(Select(v, 0, 0), 0, 0)));
}

TEST(AttentionTest, BoolMaskEqualsAMinusInfinityFloatMask) {
  Generator gen(2);
  Tensor q = Randn({3, 2}, Options(DType::kFloat64), &gen);
  Tensor k = Randn({4, 2}, Options(DType::kFloat64), &gen);
  Tensor v = Randn({4, 2}, Options(DType::kFloat64), &gen);
  std::vector<uint8_t> keep = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1};
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> add;
  for (uint8_t b : keep) add.push_back(b ? 0.0 : -inf);
  Tensor bool_mask = ConvertTo(FromVector<uint8_t>(keep, {3, 4}), DType::kBool);
  Tensor out_bool = ScaledDotProductAttention(q, k, v, false, bool_mask);
  Tensor out_float = ScaledDotProductAttention(q, k, v, false, FromVector<double>(add, {3, 4}));
  EXPECT_EQ(ToVector<double>(out_bool), ToVector<double>(out_float));
  EXPECT_NE(ToVector<double>(out_bool), ToVector<double>(ScaledDotProductAttention(q, k, v)));
}

TEST(AttentionGradTest, PlainCausalAndMaskedWithBroadcastBatches) {
  Generator gen(3);
  Tensor q = RandLeaf({2, 3, 4}, &gen), k = RandLeaf({2, 5, 4}, &gen);
  Tensor v = RandLeaf({2, 5, 6}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return ScaledDotProductAttention(in[0], in[1], in[2]); },
                   {q, k, v});
  EXPECT_GRADCHECK([](auto& in) { return ScaledDotProductAttention(in[0], in[1], in[2], true); },
                   {q, k, v});
  Tensor bias = RandLeaf({3, 5}, &gen);  // a float mask that is learned
  EXPECT_GRADCHECK(
      [](auto& in) { return ScaledDotProductAttention(in[0], in[1], in[2], false, in[3]); },
      {q, k, v, bias});
  Tensor keep = Ge(Randn({2, 1, 5}, {}, &gen), Full({1}, -0.5));      // broadcast over queries
  CopyInto(Select(keep, 2, 0), Ones({2, 1}, Options(DType::kBool)));  // no empty rows
  EXPECT_GRADCHECK(
      [&](auto& in) { return ScaledDotProductAttention(in[0], in[1], in[2], false, keep); },
      {q, k, v});
  Tensor k2 = RandLeaf({5, 4}, &gen), v2 = RandLeaf({5, 6}, &gen);  // shared over the batch
  EXPECT_GRADCHECK([](auto& in) { return ScaledDotProductAttention(in[0], in[1], in[2]); },
                   {q, k2, v2});
}

TEST(AttentionGradTest, TransposedHeadsLayout) {
  Generator gen(4);
  // (B, L, H, E) leaves used as (B, H, L, E), the usual multi-head layout.
  Tensor q = RandLeaf({1, 3, 2, 4}, &gen), k = RandLeaf({1, 3, 2, 4}, &gen);
  Tensor v = RandLeaf({1, 3, 2, 4}, &gen);
  EXPECT_GRADCHECK(
      [](auto& in) {
        return ScaledDotProductAttention(Transpose(in[0], 1, 2), Transpose(in[1], 1, 2),
                                         Transpose(in[2], 1, 2), true);
      },
      {q, k, v});
}

// The fused kernel (no mask, or causal) against the composed reference, reached through an
// equivalent bool mask: outputs and all three gradients, on sizes that span several row
// blocks, more queries than keys and fewer, and strided per-head views.
TEST(AttentionTest, FusedKernelMatchesTheComposedReference) {
  struct Case {
    int64_t l, s, e, ev;
    bool causal;
  };
  Generator gen(5);
  for (const Case& c : {Case{37, 41, 5, 7, true}, Case{70, 33, 3, 2, true}, Case{9, 75, 4, 4, true},
                        Case{37, 41, 5, 7, false}, Case{1, 1, 1, 1, true}}) {
    SCOPED_TRACE(::testing::Message() << "l=" << c.l << " s=" << c.s << " causal=" << c.causal);
    // q, k, v as per-head views of one (B, T, 3, H, E) tensor, like GPT's c_attn output.
    Tensor q = RandLeaf({2, c.l, 3, c.e}, &gen), k = RandLeaf({2, c.s, 3, c.e}, &gen);
    Tensor v = RandLeaf({2, c.s, 3, c.ev}, &gen);
    Tensor gout = Randn({2, 3, c.l, c.ev}, Options(DType::kFloat64), &gen);
    auto run = [&](bool fused) {
      Tensor qh = Transpose(q, 1, 2), kh = Transpose(k, 1, 2), vh = Transpose(v, 1, 2);
      Tensor out;
      if (fused) {
        out = ScaledDotProductAttention(qh, kh, vh, c.causal, Tensor(), 0.37);
      } else {
        Tensor keep =
            c.causal ? Le(Reshape(Arange(c.s), {1, c.s}), Reshape(Arange(c.l), {c.l, 1}))
                     : Ge(Reshape(Arange(c.s), {1, c.s}), Zeros({1, 1}, Options(DType::kInt64)));
        out = ScaledDotProductAttention(qh, kh, vh, false, keep, 0.37);
      }
      auto g = autograd::Grad({out}, {q, k, v}, {gout});
      EXPECT_TRUE(g.ok());
      std::vector<std::vector<double>> r = {ToVector<double>(out)};
      for (const Tensor& t : *g) r.push_back(ToVector<double>(t));
      return r;
    };
    const auto fused = run(true), ref = run(false);
    for (size_t t = 0; t < fused.size(); ++t) {
      ASSERT_EQ(fused[t].size(), ref[t].size());
      for (size_t i = 0; i < fused[t].size(); ++i)
        ASSERT_NEAR(fused[t][i], ref[t][i], 1e-12) << "tensor " << t << " element " << i;
    }
  }
}

TEST(AttentionDeathTest, CausalAndExplicitMaskTogetherAreAnError) {
  Tensor q = Ones({2, 3});
  EXPECT_DEATH(ScaledDotProductAttention(q, q, q, true, Ones({2, 2})),
               "scaled_dot_product_attention: pass either is_causal or attn_mask, not both");
  EXPECT_DEATH(ScaledDotProductAttention(q, Ones({2, 4}), Ones({2, 4})),
               "scaled_dot_product_attention: query size E 3 differs from the key size 4");
}

}  // namespace
}  // namespace trainyard::ops
