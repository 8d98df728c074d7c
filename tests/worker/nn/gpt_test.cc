#include "worker/nn/gpt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/nn/golden_util.h"
#include "tests/worker/nn/stats_util.h"
#include "worker/autograd/engine.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/loss.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using ::testing::HasSubstr;
using testing::RelativeError;

std::shared_ptr<Gpt> Build(const GptConfig& config, Generator* gen = nullptr) {
  TY_CHECK(Validate(config).ok()) << Validate(config);
  return std::make_shared<Gpt>(config, gen);
}

// The parity case's config: vocab 11, context 8, 2 layers, 2 heads, n_embd 16.
GptConfig Tiny(double dropout = 0) { return {11, 8, 2, 2, 16, dropout, true}; }

Tensor StateEntry(const Module& m, const std::string& key) {
  for (const auto& [name, t] : m.StateDict())
    if (name == key) return t;
  ADD_FAILURE() << "no state dict entry " << key;
  return Tensor();
}

TEST(GptTest, StateDictMatchesNanoGpt) {
  testing::ExpectStateDictMatchesTorch(*Build({65, 32, 2, 4, 32, 0, true}), "gpt_small");
  testing::ExpectStateDictMatchesTorch(*Build({50, 16, 3, 2, 8, 0, false}), "gpt_nobias");
}

TEST(GptTest, LmHeadIsTheTokenEmbedding) {
  auto model = Build(Tiny());
  EXPECT_EQ(StateEntry(*model, "lm_head.weight").impl(),
            StateEntry(*model, "transformer.wte.weight").impl());
  for (const auto& [name, p] : model->NamedParameters()) EXPECT_NE(name, "lm_head.weight");
  EXPECT_EQ(model->NumNonEmbeddingParameters(), model->NumParameters() - 8 * 16);
}

TEST(GptTest, InitialisesLikeNanoGpt) {
  Generator gen(1);
  auto model = Build({64, 16, 4, 4, 64, 0, true}, &gen);
  using testing::StatsOf;
  EXPECT_NEAR(StatsOf(StateEntry(*model, "transformer.h.1.attn.c_attn.weight")).std, 0.02, 4e-4);
  EXPECT_NEAR(StatsOf(StateEntry(*model, "transformer.h.0.mlp.c_fc.weight")).std, 0.02, 4e-4);
  EXPECT_NEAR(StatsOf(StateEntry(*model, "transformer.wte.weight")).std, 0.02, 8e-4);
  const double proj = 0.02 / std::sqrt(2.0 * 4);
  EXPECT_NEAR(StatsOf(StateEntry(*model, "transformer.h.2.attn.c_proj.weight")).std, proj,
              0.03 * proj);
  EXPECT_NEAR(StatsOf(StateEntry(*model, "transformer.h.3.mlp.c_proj.weight")).std, proj,
              0.02 * proj);
  EXPECT_EQ(ToVector<float>(StateEntry(*model, "transformer.h.0.attn.c_attn.bias")),
            std::vector<float>(192, 0));
  EXPECT_EQ(ToVector<float>(StateEntry(*model, "transformer.ln_f.weight")),
            std::vector<float>(64, 1));
}

TEST(GptTest, ForwardMatchesNanoGptIncludingGradients) {
  const auto golden = testing::ParityCase("gpt");
  auto model = Build(Tiny());
  ASSERT_TRUE(model->LoadStateDict(testing::StateOf(golden)).ok());
  model->Eval();
  Tensor logits = model->Forward(golden.at("x"));
  ASSERT_EQ(logits.shape(), (Shape{2, 6, 11}));
  EXPECT_LE(RelativeError(logits, golden.at("out")), 1e-5);
  Tensor loss =
      ops::CrossEntropy(ops::Reshape(logits, {-1, 11}), ops::Reshape(golden.at("targets"), {-1}));
  EXPECT_LE(RelativeError(loss, golden.at("loss")), 1e-5);
  ASSERT_TRUE(autograd::Backward(loss).ok());
  for (const char* key : {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight"}) {
    SCOPED_TRACE(key);
    Tensor grad = StateEntry(*model, key).grad();
    ASSERT_TRUE(grad.defined());
    EXPECT_LE(RelativeError(grad, golden.at(std::string("grad.") + key)), 1e-5);
  }
}

TEST(GptTest, LoadsACheckpointThatStoresTheTiedWeightOnce) {
  const auto golden = testing::ParityCase("gpt");
  NamedTensors state = testing::StateOf(golden);
  ASSERT_EQ(state.back().first, "lm_head.weight");
  state.pop_back();
  auto model = Build(Tiny());
  ASSERT_TRUE(model->LoadStateDict(state).ok());
  model->Eval();
  EXPECT_LE(testing::RelativeError(model->Forward(golden.at("x")), golden.at("out")), 1e-5);
}

TEST(GptTest, EarlierPositionsDoNotSeeLaterTokens) {
  Generator gen(2);
  auto model = Build(Tiny(), &gen);
  Tensor a = FromVector<int64_t>({1, 2, 3, 4, 5}, {1, 5});
  Tensor b = FromVector<int64_t>({1, 2, 3, 9, 0}, {1, 5});
  const std::vector<float> la = ToVector<float>(model->Forward(a));
  const std::vector<float> lb = ToVector<float>(model->Forward(b));
  for (int i = 0; i < 3 * 11; ++i) EXPECT_EQ(la[i], lb[i]);  // positions 0..2
  EXPECT_NE(la[3 * 11], lb[3 * 11]);
}

TEST(GptTest, DropoutActsOnlyInTraining) {
  Generator gen(3);
  auto model = Build(Tiny(0.2), &gen);
  Tensor idx = RandInt({2, 8}, 0, 11, Options(DType::kInt64), &gen);
  EXPECT_NE(ToVector<float>(model->Forward(idx)), ToVector<float>(model->Forward(idx)));
  model->Eval();
  EXPECT_EQ(ToVector<float>(model->Forward(idx)), ToVector<float>(model->Forward(idx)));
}

TEST(GptTest, AttentionWithDropoutComputesTheSameCausalAttention) {
  // Training with dropout > 0 takes the explicit softmax(q k^T) path; with p = 1e-9 no
  // element is dropped (in all likelihood) and the scale is 1, so it must agree with eval.
  Generator gen(7);
  auto model = Build(Tiny(1e-9), &gen);
  Tensor idx = RandInt({2, 8}, 0, 11, Options(DType::kInt64), &gen);
  Tensor train = model->Forward(idx);
  model->Eval();
  EXPECT_LE(testing::RelativeError(train, model->Forward(idx)), 1e-6);
}

TEST(GptTest, TheSameSeedGivesTheSameModel) {
  Generator a(4), b(4), c(5);
  auto first = Build(Tiny(), &a);
  EXPECT_TRUE(testing::SameState(*first, *Build(Tiny(), &b)));
  EXPECT_FALSE(testing::SameState(*first, *Build(Tiny(), &c)));
}

// A pipeline's stages run the model in parts, a detached activation between them: the logits
// and every gradient are Forward's.
TEST(GptTest, EmbedBlocksAndHeadInStagesComputeForward) {
  Generator gen(8);
  auto model = Build(Tiny(), &gen);
  const Tensor idx = RandInt({2, 7}, 0, 11, Options(DType::kInt64), &gen);
  Tensor whole = model->Forward(idx);
  ASSERT_TRUE(autograd::Backward(ops::Mean(ops::Mul(whole, whole))).ok());
  std::vector<std::vector<float>> want;
  for (const Tensor& p : model->Parameters()) want.push_back(ToVector<float>(p.grad()));
  model->ZeroGrad();
  // Stage 1: the embeddings and block 0; stage 2: block 1 and the head.
  Tensor first = model->Blocks(0, 1, model->Embed(idx));
  Tensor between = first.detach().set_requires_grad(true);
  Tensor logits = model->Head(model->Blocks(1, 2, between));
  EXPECT_EQ(ToVector<float>(logits), ToVector<float>(whole));
  ASSERT_TRUE(autograd::Backward(ops::Mean(ops::Mul(logits, logits))).ok());
  ASSERT_TRUE(autograd::Backward(first, between.grad()).ok());
  const std::vector<Tensor> params = model->Parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    const std::vector<float> got = ToVector<float>(params[k].grad());
    ASSERT_EQ(got.size(), want[k].size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[k][i], 1e-6) << k << " " << i;
  }
}

TEST(GptTest, BackwardReachesEveryParameterWithAndWithoutDropout) {
  for (double dropout : {0.0, 0.1}) {
    SCOPED_TRACE(dropout);
    Generator gen(6);
    auto model = Build(Tiny(dropout), &gen);
    testing::ExpectBackwardReachesEveryParameter(
        *model, RandInt({2, 7}, 0, 11, Options(DType::kInt64), &gen));
  }
}

TEST(GptTest, SequencesLongerThanTheContextAreAClearError) {
  auto model = Build(Tiny());
  Tensor long_idx = Zeros({1, 9}, Options(DType::kInt64));
  StatusOr<Tensor> out = model->TryForward(long_idx);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(),
              HasSubstr("sequence length 9 must lie in [1, 8] (gpt.context)"));
  EXPECT_DEATH(model->Forward(long_idx),
               "cannot forward a sequence of length 9; the context \\(block size\\) is 8");
}

TEST(GptTest, CheckInputRejectsBadTokensAndShapes) {
  auto model = Build(Tiny());
  EXPECT_TRUE(model->CheckInput(Zeros({2, 8}, Options(DType::kInt64))).ok());
  EXPECT_THAT(model->CheckInput(FromVector<int64_t>({3, 11}, {1, 2})).message(),
              HasSubstr("token id 11 must lie in [0, 11)"));
  EXPECT_THAT(model->CheckInput(Zeros({2, 8})).message(),
              HasSubstr("it must be int64 token ids (B, T)"));
}

TEST(GptTest, ValidationNamesTheFieldTheValueAndTheRange) {
  const std::pair<GptConfig, const char*> cases[] = {
      {{0, 8, 2, 2, 16, 0, true}, "gpt.vocab_size is 0; it must be at least 1"},
      {{11, 0, 2, 2, 16, 0, true}, "gpt.context is 0"},
      {{11, 8, 0, 2, 16, 0, true}, "gpt.n_layer is 0"},
      {{11, 8, 2, 0, 16, 0, true}, "gpt.n_head is 0"},
      {{11, 8, 2, 2, -16, 0, true}, "gpt.n_embd is -16"},
      {{11, 8, 2, 3, 16, 0, true}, "gpt.n_head is 3; it must divide gpt.n_embd (16)"},
      {{11, 8, 2, 2, 16, 1, true}, "gpt.dropout is 1; it must lie in [0, 1)"},
      {{50304, 1024, 1000, 16, 16384, 0, true}, "gpt: the config gives"},
  };
  for (const auto& [config, message] : cases) {
    EXPECT_THAT(Validate(config).message(), HasSubstr(message));
    EXPECT_EQ(BuildGpt(config).status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace trainyard::nn
