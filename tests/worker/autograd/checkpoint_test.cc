#include "worker/autograd/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <memory>

#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/autograd/hooks.h"
#include "worker/autograd/node.h"
#include "worker/ops/activation.h"
#include "worker/ops/dropout.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/linalg.h"
#include "worker/ops/norm.h"
#include "worker/ops/reduction.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"

namespace trainyard::autograd {
namespace {

using namespace trainyard::ops;  // NOLINT: the ops the checkpointed functions use

constexpr uint64_t kSeed = 20240611;

Tensor Param(const Shape& shape, Generator* gen, double scale = 0.3) {
  Tensor t = MulScalar(Randn(shape, {}, gen), scale);
  t.set_requires_grad(true);
  return t;
}

std::vector<float> Vec(const Tensor& t) { return ToVector<float>(t); }

// Fresh leaves with the same values, so two runs accumulate into separate .grad.
std::vector<Tensor> Copies(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) {
    Tensor c = Clone(t.detach());
    c.set_requires_grad(t.requires_grad());
    out.push_back(c);
  }
  return out;
}

void ExpectSameGrads(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].grad().defined()) << "tensor " << i;
    ASSERT_TRUE(b[i].grad().defined()) << "tensor " << i;
    EXPECT_EQ(Vec(a[i].grad()), Vec(b[i].grad())) << "tensor " << i;  // bit for bit
  }
}

// A two-layer MLP: x (N, 8) -> (N, 8) through (N, 16). p = {w1, b1, w2, b2}.
Tensor Mlp(const Tensor& x, const std::vector<Tensor>& p) {
  return ops::Linear(ops::Tanh(ops::Linear(x, p[0], p[1])), p[2], p[3]);
}

std::vector<Tensor> MlpParams(Generator* gen) {
  return {Param({16, 8}, gen), Param({16}, gen), Param({8, 16}, gen), Param({8}, gen)};
}

// x: (N, 8); returns sum((mlp(x) * 1.5)^2) with the MLP checkpointed or not.
Tensor MlpLoss(const Tensor& x, const std::vector<Tensor>& p, bool checkpoint) {
  auto fn = [&p](const Tensor& in) { return Mlp(in, p); };
  Tensor y = checkpoint ? Checkpoint(fn, x) : fn(x);
  Tensor z = MulScalar(y, 1.5);
  return Sum(Mul(z, z));
}

TEST(CheckpointTest, MlpGradientsEqualThoseWithoutCheckpointing) {
  Generator gen(kSeed);
  std::vector<Tensor> plain = MlpParams(&gen);
  plain.push_back(Param({5, 8}, &gen, 1.0));  // the input, last
  std::vector<Tensor> ckpt = Copies(plain);
  auto split = [](std::vector<Tensor> v) {
    Tensor x = v.back();
    v.pop_back();
    return std::make_pair(x, v);
  };
  auto [x0, p0] = split(plain);
  auto [x1, p1] = split(ckpt);
  Tensor loss0 = MlpLoss(x0, p0, false), loss1 = MlpLoss(x1, p1, true);
  EXPECT_EQ(loss0.item(), loss1.item());
  ASSERT_TRUE(Backward(loss0).ok());
  ASSERT_TRUE(Backward(loss1).ok());
  ExpectSameGrads(plain, ckpt);
}

TEST(CheckpointTest, ForwardKeepsNoActivationsAndRunsFnOnceEachWay) {
  Generator gen(kSeed);
  std::vector<Tensor> p = MlpParams(&gen);
  Tensor x = Param({3, 8}, &gen, 1.0);
  int calls = 0;
  std::weak_ptr<TensorImpl> hidden;
  CheckpointFn fn = [&](const std::vector<Tensor>& in) {
    ++calls;
    Tensor h = ops::Tanh(ops::Linear(in[0], p[0], p[1]));  // saved by Linear when recorded
    hidden = h.impl_ptr();
    return std::vector<Tensor>{ops::Linear(h, p[2], p[3])};
  };
  Tensor plain = fn({x})[0];
  EXPECT_FALSE(hidden.expired()) << "without checkpointing the graph keeps the activation";
  std::vector<Tensor> y = Checkpoint(fn, {x});
  EXPECT_TRUE(hidden.expired()) << "the checkpointed forward must not keep fn's activations";
  EXPECT_EQ(calls, 2);
  ASSERT_NE(y[0].grad_fn(), nullptr);
  EXPECT_STREQ(y[0].grad_fn()->name(), "CheckpointBackward");
  EXPECT_EQ(y[0].grad_fn()->next_edges().size(), 1u);  // the input only, no parameter
  EXPECT_EQ(Vec(y[0]), Vec(plain));
  ASSERT_TRUE(Backward(Sum(y[0])).ok());
  EXPECT_EQ(calls, 3) << "backward recomputes fn once";
}

TEST(CheckpointTest, PostAccumulateHooksFireForCapturedParametersAndInputs) {
  Generator gen(kSeed);
  std::vector<Tensor> p = MlpParams(&gen);
  Tensor x = Param({3, 8}, &gen, 1.0);
  std::vector<int> fired(p.size() + 1, 0);
  for (size_t i = 0; i < p.size(); ++i) {
    RegisterPostAccumulateGradHook(p[i], [&fired, i](const Tensor& leaf) {
      EXPECT_TRUE(leaf.grad().defined());
      ++fired[i];
    });
  }
  RegisterPostAccumulateGradHook(x, [&fired](const Tensor&) { ++fired.back(); });
  ASSERT_TRUE(Backward(MlpLoss(x, p, /*checkpoint=*/true)).ok());
  EXPECT_EQ(fired, std::vector<int>(p.size() + 1, 1));
}

// A nanoGPT block with dropout, from ops (see worker/nn/gpt.h). x: (B, T, C) -> (B, T, C).
struct BlockParams {
  int64_t n_head = 2;
  double p = 0.3;
  Generator* gen = nullptr;  // drives dropout
  // ln1 w, b; attn w, b; proj w, b; ln2 w, b; fc w, b; fc_proj w, b.
  std::vector<Tensor> w;
};

BlockParams MakeBlock(int64_t c, Generator* init, Generator* dropout) {
  BlockParams b;
  b.gen = dropout;
  auto ln = [&] {
    b.w.push_back(AddScalar(Param({c}, init, 0.1), 1.0).detach().set_requires_grad(true));
    b.w.push_back(Param({c}, init, 0.1));
  };
  ln();
  for (auto [out, in] : {std::pair<int64_t, int64_t>{3 * c, c}, {c, c}}) {
    b.w.push_back(Param({out, in}, init));
    b.w.push_back(Param({out}, init, 0.05));
  }
  ln();
  for (auto [out, in] : {std::pair<int64_t, int64_t>{4 * c, c}, {c, 4 * c}}) {
    b.w.push_back(Param({out, in}, init));
    b.w.push_back(Param({out}, init, 0.05));
  }
  return b;
}

Tensor Attention(const Tensor& x, const BlockParams& b) {
  const int64_t n = x.size(0), t = x.size(1), c = x.size(2), hs = c / b.n_head;
  std::vector<Tensor> qkv = ops::Split(ops::Linear(x, b.w[2], b.w[3]), c, 2);
  auto heads = [&](const Tensor& m) {
    return ops::Transpose(ops::View(m, {n, t, b.n_head, hs}), 1, 2);  // (B, nh, T, hs)
  };
  Tensor att = ops::MulScalar(ops::Matmul(heads(qkv[0]), ops::Transpose(heads(qkv[1]), -2, -1)),
                              1 / std::sqrt(static_cast<double>(hs)));
  const Tensor future = ops::Gt(ops::Reshape(Arange(t), {1, t}), ops::Reshape(Arange(t), {t, 1}));
  att = ops::Softmax(ops::MaskedFill(att, future, -std::numeric_limits<double>::infinity()), -1);
  att = ops::Dropout(att, b.p, true, b.gen);
  Tensor y = ops::Reshape(ops::Transpose(ops::Matmul(att, heads(qkv[2])), 1, 2), {n, t, c});
  return ops::Dropout(ops::Linear(y, b.w[4], b.w[5]), b.p, true, b.gen);
}

Tensor Block(const Tensor& x, const BlockParams& b) {
  const int64_t c = x.size(2);
  Tensor h = ops::Add(x, Attention(ops::LayerNorm(x, {c}, b.w[0], b.w[1]), b));
  Tensor m = ops::LayerNorm(h, {c}, b.w[6], b.w[7]);
  m = ops::Linear(ops::Gelu(ops::Linear(m, b.w[8], b.w[9])), b.w[10], b.w[11]);
  return ops::Add(h, ops::Dropout(m, b.p, true, b.gen));
}

// Two blocks with dropout between them, checkpointed or not; returns a scalar loss.
Tensor TwoBlockLoss(const Tensor& x, const BlockParams& b1, const BlockParams& b2,
                    bool checkpoint) {
  auto run = [checkpoint](const BlockParams& b, const Tensor& in) {
    if (!checkpoint) return Block(in, b);
    CheckpointOptions options;
    options.generators = {b.gen};
    return Checkpoint([&b](const Tensor& t) { return Block(t, b); }, in, options);
  };
  Tensor h = ops::Dropout(run(b1, x), b1.p, true, b1.gen);
  Tensor y = run(b2, h);
  return Sum(Mul(y, y));
}

TEST(CheckpointTest, GptBlocksWithDropoutGiveTheSameGradientsAndGeneratorState) {
  std::cout << "seed " << kSeed << "\n";
  Generator init(kSeed), gen0(kSeed + 1), gen1(kSeed + 1);
  const int64_t c = 8;
  BlockParams a1 = MakeBlock(c, &init, &gen0), a2 = MakeBlock(c, &init, &gen0);
  Tensor x0 = Param({2, 5, c}, &init, 1.0);
  BlockParams b1 = a1, b2 = a2;
  b1.gen = b2.gen = &gen1;
  b1.w = Copies(a1.w);
  b2.w = Copies(a2.w);
  Tensor x1 = Copies({x0})[0];

  Tensor loss0 = TwoBlockLoss(x0, a1, a2, false), loss1 = TwoBlockLoss(x1, b1, b2, true);
  EXPECT_EQ(loss0.item(), loss1.item());
  EXPECT_EQ(gen0.offset(), gen1.offset());
  ASSERT_TRUE(Backward(loss0).ok());
  ASSERT_TRUE(Backward(loss1).ok());
  // The recomputes replayed the forward's masks and left no trace on the generator.
  EXPECT_EQ(gen0.offset(), gen1.offset());
  EXPECT_EQ(gen0.seed(), gen1.seed());
  ExpectSameGrads({x0}, {x1});
  ExpectSameGrads(a1.w, b1.w);
  ExpectSameGrads(a2.w, b2.w);
}

TEST(CheckpointTest, WithoutRngReplayDropoutMasksDiffer) {
  Generator init(kSeed), gen0(kSeed + 1), gen1(kSeed + 1);
  Tensor w0 = Param({64}, &init, 1.0), x0 = Param({64}, &init, 1.0);
  Tensor w1 = Copies({w0})[0], x1 = Copies({x0})[0];
  auto fn = [](const Tensor& w, Generator* g) {
    return [w, g](const Tensor& in) { return ops::Dropout(ops::Mul(in, w), 0.5, true, g); };
  };
  CheckpointOptions replay, fresh;
  replay.generators = {&gen0};
  fresh.generators = {&gen1};
  fresh.preserve_rng_state = false;
  ASSERT_TRUE(Backward(Sum(Checkpoint(fn(w0, &gen0), x0, replay))).ok());
  ASSERT_TRUE(Backward(Sum(Checkpoint(fn(w1, &gen1), x1, fresh))).ok());
  EXPECT_NE(Vec(w0.grad()), Vec(w1.grad()));
  EXPECT_LT(gen0.offset(), gen1.offset()) << "the fresh recompute advanced its generator";
}

TEST(CheckpointTest, DefaultGeneratorIsReplayedWhenNoneIsNamed) {
  ManualSeed(kSeed);
  Generator init(kSeed);
  Tensor w0 = Param({64}, &init, 1.0), x0 = Param({64}, &init, 1.0);
  Tensor w1 = Copies({w0})[0], x1 = Copies({x0})[0];
  auto fn = [](const Tensor& w) {
    return [w](const Tensor& in) { return ops::Dropout(ops::Mul(in, w), 0.5, true); };
  };
  // A draw between forward and backward: the recompute must neither repeat nor undo it.
  Tensor loss0 = Sum(fn(w0)(x0));
  const std::vector<float> between0 = Vec(Rand({4}));
  ASSERT_TRUE(Backward(loss0).ok());
  const uint64_t offset = DefaultGenerator().offset();
  ManualSeed(kSeed);
  Tensor loss1 = Sum(Checkpoint(fn(w1), x1));
  EXPECT_EQ(Vec(Rand({4})), between0);
  ASSERT_TRUE(Backward(loss1).ok());
  EXPECT_EQ(DefaultGenerator().offset(), offset);
  ExpectSameGrads({w0, x0}, {w1, x1});
}

TEST(CheckpointTest, WithoutGradModeOrGradInputsItJustCallsFn) {
  Generator gen(kSeed);
  std::vector<Tensor> p = MlpParams(&gen);
  Tensor x = Randn({3, 8}, {}, &gen);  // requires no grad
  int calls = 0;
  auto fn = [&](const Tensor& in) {
    ++calls;
    return Mlp(in, p);
  };
  {
    NoGradGuard no_grad;
    Tensor y = Checkpoint(fn, x);
    EXPECT_FALSE(y.requires_grad());
  }
  // Only the captured parameters need grad: an ordinary graph, so their gradients are right.
  Tensor y = Checkpoint(fn, x);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_STRNE(y.grad_fn()->name(), "CheckpointBackward");
  ASSERT_TRUE(Backward(Sum(y)).ok());
  EXPECT_EQ(calls, 2);
  std::vector<Tensor> q = Copies(p);
  ASSERT_TRUE(Backward(Sum(Mlp(x, q))).ok());
  ExpectSameGrads(p, q);
}

TEST(CheckpointTest, NestedCheckpointsGiveTheSameGradients) {
  Generator gen(kSeed);
  std::vector<Tensor> p = MlpParams(&gen);
  Tensor x = Param({4, 8}, &gen, 1.0);
  std::vector<Tensor> q = Copies(p);
  Tensor x1 = Copies({x})[0];
  int inner_calls = 0;
  auto inner = [&](const Tensor& in) {
    ++inner_calls;
    return ops::Tanh(ops::Linear(in, q[0], q[1]));
  };
  auto outer = [&](const Tensor& in) { return ops::Linear(Checkpoint(inner, in), q[2], q[3]); };
  ASSERT_TRUE(Backward(Sum(Mlp(x, p))).ok());
  ASSERT_TRUE(Backward(Sum(Checkpoint(outer, x1))).ok());
  ExpectSameGrads(p, q);
  ExpectSameGrads({x}, {x1});
  // Outer forward (inner just runs), outer recompute (inner checkpoints), inner recompute.
  EXPECT_EQ(inner_calls, 3);
}

TEST(CheckpointTest, SeveralOutputsAndInputsWithSomeWithoutGrad) {
  Generator gen(kSeed);
  Tensor a = Param({6}, &gen, 1.0), b = Param({6}, &gen, 1.0);
  Tensor c = Randn({6}, {}, &gen);  // a constant input
  CheckpointFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::Mul(in[0], in[2]), ops::Exp(in[1]), ops::Mul(in[0], in[1])};
  };
  std::vector<Tensor> plain = fn({a, b, c});
  Tensor a1 = Copies({a})[0], b1 = Copies({b})[0];
  std::vector<Tensor> ckpt = Checkpoint(fn, {a1, b1, c});
  ASSERT_EQ(ckpt.size(), 3u);
  // Output 1 gets no gradient at all.
  ASSERT_TRUE(Backward(Sum(ops::Add(plain[0], plain[2]))).ok());
  ASSERT_TRUE(Backward(Sum(ops::Add(ckpt[0], ckpt[2]))).ok());
  ExpectSameGrads({a, b}, {a1, b1});
}

TEST(CheckpointTest, RetainGraphAllowsASecondBackwardAndOtherwiseItIsAnError) {
  Generator gen(kSeed);
  std::vector<Tensor> p = MlpParams(&gen);
  Tensor x = Param({2, 8}, &gen, 1.0);
  Tensor loss = MlpLoss(x, p, true);
  ASSERT_TRUE(Backward(loss, Tensor(), /*retain_graph=*/true).ok());
  const std::vector<float> once = Vec(p[0].grad());
  ASSERT_TRUE(Backward(loss).ok());
  std::vector<float> twice = Vec(p[0].grad());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  Status s = Backward(loss);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
}

TEST(CheckpointTest, ModifyingAnInputInPlaceAfterTheForwardIsAnError) {
  Generator gen(kSeed);
  Tensor w = Param({4}, &gen, 1.0);
  Tensor x = Param({4}, &gen, 1.0);
  Tensor h = MulScalar(x, 2.0);  // a non-leaf input
  Tensor y = Checkpoint([&w](const Tensor& in) { return Mul(in, w); }, h);
  CopyInto(h, ZerosLike(h));  // an unrecorded in-place write
  Status s = Backward(Sum(y));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("CheckpointBackward"), std::string::npos) << s;
}

TEST(CheckpointTest, RecomputeRunsUnderTheAutocastDTypeOfTheForward) {
  Generator gen(kSeed);
  Tensor w = Param({4}, &gen, 1.0);
  Tensor x = Param({4}, &gen, 1.0);
  std::vector<DType> seen;
  auto fn = [&](const Tensor& in) {
    seen.push_back(AutocastDType());
    return Mul(in, w);
  };
  Tensor y;
  {
    AutocastGuard bf16(DType::kBFloat16);
    y = Checkpoint(fn, x);
  }
  {
    AutocastGuard fp16(DType::kFloat16);  // the caller's state at backward does not matter
    ASSERT_TRUE(Backward(Sum(y)).ok());
  }
  // Forward, then the recompute inside backward (where the engine has autocast off).
  EXPECT_EQ(seen, (std::vector<DType>{DType::kBFloat16, DType::kBFloat16}));
  EXPECT_EQ(Vec(w.grad()), Vec(x));
}

}  // namespace
}  // namespace trainyard::autograd
