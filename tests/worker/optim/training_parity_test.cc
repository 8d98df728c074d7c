// Trains zoo models with our optimizers and compares every step's loss with PyTorch's, from the
// same initial weights on the same batches (tests/golden/training.txt, written by
// tests/golden/make_training_golden.py, which describes the data and the runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/golden.h"
#include "tests/testing/graph_specs.h"
#include "worker/autograd/engine.h"
#include "worker/nn/graph.h"
#include "worker/nn/zoo.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

using trainyard::testing::GoldenCase;

constexpr int kSteps = 50;
// Per-step |ours - torch| / |torch| of the loss. Both sides compute in float32; measured at
// most 2.1e-7 over the four runs. Momentum 0.89 instead of 0.9, or AdamW without its weight
// decay, exceeds it within 4 to 8 steps.
constexpr double kTolerance = 1e-4;

std::string TrainingGoldenPath() { return trainyard::testing::GoldenPath("training.txt"); }

// The case named `name`; fails the calling test (and returns nullptr) when it is missing.
const GoldenCase* TrainingCase(const std::string& name) {
  static const auto* cases =
      new std::vector<GoldenCase>(trainyard::testing::ReadGolden(TrainingGoldenPath()));
  for (const GoldenCase& c : *cases)
    if (c.name == name) return &c;
  ADD_FAILURE() << "no case " << name << " in " << TrainingGoldenPath()
                << "; run python3 tests/golden/make_training_golden.py";
  return nullptr;
}

// The case's "state.<key>" tensors as a state dict, in file order. GPT's tied weight is stored
// once, under transformer.wte.weight.
nn::NamedTensors InitialState(const GoldenCase& c) {
  nn::NamedTensors state;
  const std::string prefix = "state.";
  for (const std::string& key : c.order)
    if (key.compare(0, prefix.size(), prefix) == 0)
      state.emplace_back(key.substr(prefix.size()), c.at(key));
  return state;
}

struct Batch {
  Tensor input;   // model input
  Tensor target;  // class index per row of the flattened logits
};

// MLP: batch t is rows batches[t] of the pool x (POOL, 64) with labels y (POOL).
std::vector<Batch> MlpBatches(const GoldenCase& c) {
  const std::vector<float> x = ToVector<float>(c.at("x"));
  const std::vector<int64_t> y = ToVector<int64_t>(c.at("y"));
  const std::vector<int64_t> rows = ToVector<int64_t>(c.at("batches"));
  const int64_t features = c.at("x").size(1), batch = c.at("batches").size(1);
  std::vector<Batch> out;
  for (int64_t t = 0; t < c.at("batches").size(0); ++t) {
    std::vector<float> inputs;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t row = rows[t * batch + i];
      inputs.insert(inputs.end(), x.begin() + row * features, x.begin() + (row + 1) * features);
      labels.push_back(y[row]);
    }
    out.push_back({FromVector<float>(inputs, {batch, features}), FromVector<int64_t>(labels)});
  }
  return out;
}

// GPT: tokens (STEPS, B, T + 1); batch t reads tokens[t, :, :-1] and predicts tokens[t, :, 1:].
std::vector<Batch> GptBatches(const GoldenCase& c) {
  const Tensor& tokens = c.at("tokens");
  const int64_t len = tokens.size(2) - 1;
  std::vector<Batch> out;
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    Tensor seqs = ops::Select(tokens, 0, t);  // (B, T + 1)
    out.push_back({ops::Contiguous(ops::Narrow(seqs, 1, 0, len)),
                   ops::Contiguous(ops::Narrow(seqs, 1, 1, len))});
  }
  return out;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<NamedTensor>)>;

MakeOptimizer MakeSgd() {  // torch.optim.SGD(lr=0.05, momentum=0.9)
  return [](std::vector<NamedTensor> params) -> std::unique_ptr<Optimizer> {
    SGDOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    auto sgd = SGD::Create(std::move(params), o);
    EXPECT_TRUE(sgd.ok()) << sgd.status();
    return sgd.ok() ? std::move(sgd).value() : nullptr;
  };
}

MakeOptimizer MakeAdamW() {  // torch.optim.AdamW(lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
  return [](std::vector<NamedTensor> params) -> std::unique_ptr<Optimizer> {
    AdamWOptions o;
    o.lr = 3e-3;
    o.beta1 = 0.9;
    o.beta2 = 0.95;
    o.weight_decay = 0.1;
    auto adamw = AdamW::Create(std::move(params), o);
    EXPECT_TRUE(adamw.ok()) << adamw.status();
    return adamw.ok() ? std::move(adamw).value() : nullptr;
  };
}

// Loads the initial weights of case `model_name` into `model`, trains it for kSteps steps
// (zero grad, forward, cross entropy, backward, step) on `batches` and compares each step's
// loss, taken before its update, with case "<model_name>_<optimizer_name>".
void ExpectLossesMatchTorch(const std::string& model_name, nn::Module& model,
                            const std::vector<Batch>& batches, const std::string& optimizer_name,
                            const MakeOptimizer& make) {
  const std::string run = model_name + "_" + optimizer_name;
  SCOPED_TRACE(run);
  const GoldenCase* setup = TrainingCase(model_name);
  const GoldenCase* golden = TrainingCase(run);
  if (setup == nullptr || golden == nullptr) return;
  const Status loaded = model.LoadStateDict(InitialState(*setup));
  ASSERT_TRUE(loaded.ok()) << loaded;
  std::unique_ptr<Optimizer> optimizer = make(model.NamedParameters());
  ASSERT_NE(optimizer, nullptr);
  const std::vector<float> want = ToVector<float>(golden->at("losses"));
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(batches.size(), static_cast<size_t>(kSteps));
  double max_error = 0;
  for (int step = 0; step < kSteps; ++step) {
    optimizer->ZeroGrad();
    Tensor logits = model.Forward(batches[step].input);
    Tensor loss = ops::CrossEntropy(ops::Reshape(logits, {-1, logits.size(-1)}),
                                    ops::Reshape(batches[step].target, {-1}));
    const Status backward = autograd::Backward(loss);
    ASSERT_TRUE(backward.ok()) << backward;
    optimizer->Step();
    const double got = loss.item();
    const double error = std::abs(got - want[step]) / std::abs(want[step]);
    max_error = std::max(max_error, error);
    ASSERT_LE(error, kTolerance) << "first differing step " << step << ": loss " << got
                                 << ", torch " << want[step];
  }
  std::cout << run << ": " << kSteps << " steps, max relative loss error " << max_error << "\n";
}

std::shared_ptr<nn::Module> BuildTestMlp() {  // make_training_golden.py: MLP([64, 32, 10], "relu")
  nn::MlpConfig config;
  config.sizes = {64, 32, 10};
  auto model = nn::BuildMlp(config);
  TY_CHECK(model.ok()) << model.status();
  return std::move(model).value();
}

std::shared_ptr<nn::Module> BuildTestGpt() {  // make_training_golden.py: gpt(13, 8, 2, 2, 16)
  auto model = nn::BuildGpt({13, 8, 2, 2, 16, 0, true});
  TY_CHECK(model.ok()) << model.status();
  return std::move(model).value();
}

TEST(TrainingParityTest, MlpWithSgdMomentumFollowsTorchFor50Steps) {
  const GoldenCase* data = TrainingCase("mlp");
  ASSERT_NE(data, nullptr);
  ExpectLossesMatchTorch("mlp", *BuildTestMlp(), MlpBatches(*data), "sgd", MakeSgd());
}

TEST(TrainingParityTest, MlpWithAdamWFollowsTorchFor50Steps) {
  const GoldenCase* data = TrainingCase("mlp");
  ASSERT_NE(data, nullptr);
  ExpectLossesMatchTorch("mlp", *BuildTestMlp(), MlpBatches(*data), "adamw", MakeAdamW());
}

TEST(TrainingParityTest, TiedGptWithSgdMomentumFollowsTorchFor50Steps) {
  const GoldenCase* data = TrainingCase("gpt");
  ASSERT_NE(data, nullptr);
  ExpectLossesMatchTorch("gpt", *BuildTestGpt(), GptBatches(*data), "sgd", MakeSgd());
}

TEST(TrainingParityTest, TiedGptWithAdamWFollowsTorchFor50Steps) {
  const GoldenCase* data = TrainingCase("gpt");
  ASSERT_NE(data, nullptr);
  ExpectLossesMatchTorch("gpt", *BuildTestGpt(), GptBatches(*data), "adamw", MakeAdamW());
}

// The same runs with the models written as graphs (model.graph, tests/testing/graph_specs.h):
// the same state dict names in the same order, and the same losses as PyTorch's.
std::shared_ptr<nn::Module> BuildGraph(const std::string& json) {
  auto model = nn::BuildGraph(trainyard::testing::GraphOf(json));
  TY_CHECK(model.ok()) << model.status();
  return std::move(model).value();
}

std::vector<std::string> Names(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.StateDict()) names.push_back(name);
  return names;
}

TEST(TrainingParityTest, GraphsHaveTheZooModelsStateDictNamesInOrder) {
  EXPECT_EQ(Names(*BuildGraph(trainyard::testing::GptGraphJson(13, 8, 2, 2, 16))),
            Names(*BuildTestGpt()));
  EXPECT_EQ(Names(*BuildGraph(trainyard::testing::MlpGraphJson({64, 32, 10}))),
            Names(*BuildTestMlp()));
}

TEST(TrainingParityTest, MlpGraphWithSgdMomentumFollowsTorchFor50Steps) {
  const GoldenCase* data = TrainingCase("mlp");
  ASSERT_NE(data, nullptr);
  ExpectLossesMatchTorch("mlp", *BuildGraph(trainyard::testing::MlpGraphJson({64, 32, 10})),
                         MlpBatches(*data), "sgd", MakeSgd());
}

TEST(TrainingParityTest, TiedGptGraphWithAdamWFollowsTorchFor50Steps) {
  const GoldenCase* data = TrainingCase("gpt");
  ASSERT_NE(data, nullptr);
  ExpectLossesMatchTorch("gpt", *BuildGraph(trainyard::testing::GptGraphJson(13, 8, 2, 2, 16)),
                         GptBatches(*data), "adamw", MakeAdamW());
}

TEST(TrainingParityTest, TiedGptGraphWithSgdMomentumFollowsTorchFor50Steps) {
  const GoldenCase* data = TrainingCase("gpt");
  ASSERT_NE(data, nullptr);
  ExpectLossesMatchTorch("gpt", *BuildGraph(trainyard::testing::GptGraphJson(13, 8, 2, 2, 16)),
                         GptBatches(*data), "sgd", MakeSgd());
}

}  // namespace
}  // namespace trainyard::optim
