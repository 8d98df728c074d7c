// Weights saved from Hugging Face's GPT2LMHeadModel and LlamaForCausalLM (random
// initialisation, tests/golden/make_hf_golden.py) load through checkpoint.init_from's reader
// into a GPT-2 graph and the llama zoo entry, give PyTorch's logits to 1e-5, and train to
// PyTorch's losses to 1e-4 over 30 AdamW steps. The llama model's gradients pass a
// finite-difference check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "common/spec/model_graph.h"
#include "tests/testing/golden.h"
#include "tests/testing/graph_specs.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/nn/graph.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/loss.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/tensor/factories.h"
#include "worker/trainer/checkpoint.h"

namespace trainyard::trainer {
namespace {

using trainyard::testing::GoldenCase;

const GoldenCase* HfCase(const std::string& name) {
  static const auto* cases = new std::vector<GoldenCase>(
      trainyard::testing::ReadGolden(trainyard::testing::GoldenPath("hf.txt")));
  for (const GoldenCase& c : *cases)
    if (c.name == name) return &c;
  ADD_FAILURE() << "no case " << name << " in hf.txt; run python3 tests/golden/make_hf_golden.py";
  return nullptr;
}

std::shared_ptr<nn::Module> Build(const spec::GraphSpec& graph) {
  auto model = nn::BuildGraph(graph);
  TY_CHECK(model.ok()) << model.status();
  return std::move(model).value();
}

// The run make_hf_golden.py's LlamaConfig describes, as the llama zoo entry.
spec::LlamaSpec TestLlama() {
  spec::LlamaSpec l;
  l.vocab_size = 50;
  l.context = 16;
  l.n_layer = 2;
  l.n_head = 4;
  l.n_kv_head = 2;
  l.n_embd = 32;
  l.intermediate_size = 64;
  return l;
}

// Loads hf_<name>.safetensors as init_from would, then compares the initial logits and 30
// steps of AdamW's losses with PyTorch's.
void ExpectTorchsLogitsAndLosses(const std::string& name, nn::Module& model) {
  SCOPED_TRACE(name);
  const GoldenCase* golden = HfCase(name);
  ASSERT_NE(golden, nullptr);
  const Status loaded =
      InitFromWeights(trainyard::testing::GoldenPath("hf_" + name + ".safetensors"), &model);
  ASSERT_TRUE(loaded.ok()) << loaded;
  const Tensor& tokens = golden->at("tokens");  // (STEPS, B, T + 1)
  const int64_t len = tokens.size(2) - 1;
  auto batch = [&](int64_t step, int64_t from) {
    return ops::Contiguous(ops::Narrow(ops::Select(tokens, 0, step), 1, from, len));
  };
  model.Eval();
  {
    autograd::NoGradGuard no_grad;
    const std::vector<float> got = ToVector<float>(model.Forward(batch(0, 0)));
    const std::vector<float> want = ToVector<float>(golden->at("logits"));
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    EXPECT_LE(worst, 1e-5) << "largest logit difference from PyTorch's";
  }
  model.Train();
  optim::AdamWOptions o;
  o.lr = 3e-3, o.beta1 = 0.9, o.beta2 = 0.95, o.weight_decay = 0.1;
  auto adamw = optim::AdamW::Create(model.NamedParameters(), o);
  ASSERT_TRUE(adamw.ok()) << adamw.status();
  const std::vector<float> want = ToVector<float>(golden->at("losses"));
  for (size_t step = 0; step < want.size(); ++step) {
    (*adamw)->ZeroGrad();
    const Tensor logits = model.Forward(batch(static_cast<int64_t>(step), 0));
    const Tensor loss = ops::CrossEntropy(ops::Reshape(logits, {-1, logits.size(-1)}),
                                          ops::Reshape(batch(static_cast<int64_t>(step), 1), {-1}));
    ASSERT_TRUE(autograd::Backward(loss).ok());
    (*adamw)->Step();
    EXPECT_LE(std::abs(loss.item() - want[step]) / std::abs(want[step]), 1e-4)
        << "step " << step << ": loss " << loss.item() << ", torch " << want[step];
  }
}

TEST(PytorchWeightsTest, HuggingFaceGpt2LoadsIntoAGpt2GraphWithTorchsLogitsAndLosses) {
  // Conv1D weights transposed, the tied head stored once: the GPT-2 layout, found by shape.
  auto model = Build(trainyard::testing::GraphOf(
      trainyard::testing::GptGraphJson(50, 16, 2, 4, 32, /*gelu=*/"tanh")));
  ExpectTorchsLogitsAndLosses("gpt2", *model);
}

TEST(PytorchWeightsTest, HuggingFaceLlamaLoadsIntoTheLlamaZooEntryWithTorchsLogitsAndLosses) {
  auto model = Build(spec::LlamaGraph(TestLlama(), 0));
  ExpectTorchsLogitsAndLosses("llama", *model);
}

TEST(PytorchWeightsTest, TheLlamaZooEntryHasLlamaForCausalLMsStateDict) {
  auto model = Build(spec::LlamaGraph(TestLlama(), 0));
  std::vector<std::string> names;
  for (const auto& [name, t] : model->StateDict()) names.push_back(name);
  const std::vector<std::string> layer = {
      "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
      "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
  std::vector<std::string> want = {"model.embed_tokens.weight"};
  for (int i = 0; i < 2; ++i)
    for (const std::string& n : layer)
      want.push_back("model.layers." + std::to_string(i) + "." + n);
  want.push_back("model.norm.weight");
  want.push_back("lm_head.weight");
  EXPECT_EQ(names, want);
  EXPECT_EQ(model->StateDict()[2].second.shape(), Shape({16, 32}));  // k_proj: 2 heads of 8
}

TEST(PytorchWeightsTest, TheLlamaModelsGradientsPassAFiniteDifferenceCheck) {
  // Rotary embeddings, grouped-query attention (2 query heads per key head), RMSNorm and the
  // SwiGLU MLP: the gradient of sum(logits * v) for up to 16 elements of every parameter
  // against central differences, in the model's float32 (tests/testing/gradcheck.h is float64's).
  spec::LlamaSpec l;
  l.vocab_size = 11, l.context = 4, l.n_layer = 1, l.n_head = 2, l.n_kv_head = 1, l.n_embd = 8;
  l.intermediate_size = 12;
  auto model = Build(spec::LlamaGraph(l, 0));
  const Tensor idx = FromVector<int64_t>({1, 5, 9, 2, 7, 3, 0, 10}, {2, 4});
  Generator gen(7);
  const Tensor v = Randn({2, 4, 11}, {}, &gen);
  auto objective = [&] { return ops::Sum(ops::Mul(model->Forward(idx), v)); };
  ASSERT_TRUE(autograd::Backward(objective()).ok());
  constexpr double kEps = 1e-3;
  int checked = 0;
  for (const auto& [name, p] : model->NamedParameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::vector<float> grad = ToVector<float>(p.grad());
    float* data = p.data<float>();
    for (int64_t i = 0; i < p.numel(); i += std::max<int64_t>(1, p.numel() / 16)) {
      const float orig = data[i];
      autograd::NoGradGuard no_grad;
      data[i] = orig + static_cast<float>(kEps);
      const double plus = objective().item();
      data[i] = orig - static_cast<float>(kEps);
      const double minus = objective().item();
      data[i] = orig;
      const double numeric = (plus - minus) / (2 * kEps);
      EXPECT_NEAR(grad[static_cast<size_t>(i)], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 100);
}

}  // namespace
}  // namespace trainyard::trainer
