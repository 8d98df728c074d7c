// GptConfig::activation_checkpointing (Note [Block checkpointing] in worker/nn/gpt.h).
#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <string>

#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/autograd/node.h"
#include "worker/nn/gpt.h"
#include "worker/nn/zoo.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

constexpr uint64_t kSeed = 1234;

// vocab 11, context 8, 2 layers, 2 heads, n_embd 16.
GptConfig Tiny(double dropout, bool checkpointing) {
  GptConfig c{11, 8, 2, 2, 16, dropout, true};
  c.activation_checkpointing = checkpointing;
  return c;
}

Tensor Loss(Gpt& model, const Tensor& idx, const Tensor& targets) {
  Tensor logits = model.Forward(idx);
  return ops::CrossEntropy(ops::Reshape(logits, {-1, logits.size(-1)}),
                           ops::Reshape(targets, {-1}));
}

// How many nodes named `name` the graph below t holds.
int CountNodes(const Tensor& t, const std::string& name) {
  std::set<autograd::Node*> seen;
  std::vector<autograd::Node*> stack{t.grad_fn().get()};
  int count = 0;
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    count += name == n->name();
    for (const autograd::Edge& e : n->next_edges()) stack.push_back(e.fn.get());
  }
  return count;
}

TEST(GptCheckpointingTest, GivesTheSameLossGradientsAndGeneratorStateWithDropout) {
  std::cout << "seed " << kSeed << "\n";
  for (double dropout : {0.0, 0.2}) {
    SCOPED_TRACE(dropout);
    Generator gen_plain(kSeed), gen_ckpt(kSeed), data(kSeed + 1);
    Gpt plain(Tiny(dropout, false), &gen_plain), ckpt(Tiny(dropout, true), &gen_ckpt);
    for (int step = 0; step < 2;
         ++step) {  // the second step starts from the generator after backward
      Tensor idx = RandInt({3, 8}, 0, 11, Options(DType::kInt64), &data);
      Tensor targets = RandInt({3, 8}, 0, 11, Options(DType::kInt64), &data);
      Tensor loss_plain = Loss(plain, idx, targets), loss_ckpt = Loss(ckpt, idx, targets);
      EXPECT_EQ(CountNodes(loss_ckpt, "CheckpointBackward"), 2);
      EXPECT_EQ(CountNodes(loss_plain, "CheckpointBackward"), 0);
      EXPECT_EQ(loss_plain.item(), loss_ckpt.item()) << "step " << step;
      ASSERT_TRUE(autograd::Backward(loss_plain).ok());
      ASSERT_TRUE(autograd::Backward(loss_ckpt).ok());
      EXPECT_EQ(gen_plain.offset(), gen_ckpt.offset()) << "step " << step;
    }
    auto a = plain.NamedParameters(), b = ckpt.NamedParameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(a[i].second.grad().defined()) << a[i].first;
      EXPECT_EQ(ToVector<float>(a[i].second.grad()), ToVector<float>(b[i].second.grad()))
          << a[i].first;
    }
  }
}

TEST(GptCheckpointingTest, CheckpointsOnlyInTrainingWithGradEnabled) {
  Generator gen(kSeed);
  Gpt model(Tiny(0.1, true), &gen);
  Tensor idx = RandInt({2, 8}, 0, 11, Options(DType::kInt64), &gen);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_FALSE(model.Forward(idx).requires_grad());
  }
  model.Eval();
  EXPECT_EQ(CountNodes(model.Forward(idx), "CheckpointBackward"), 0);
  model.Train();
  EXPECT_EQ(CountNodes(model.Forward(idx), "CheckpointBackward"), 2);
}

TEST(GptCheckpointingTest, TheZooPassesTheFlagThrough) {
  ModelConfigs configs;
  configs.gpt = Tiny(0, true);
  Generator gen(kSeed);
  StatusOr<std::shared_ptr<Module>> model = BuildModel("gpt", configs, &gen);
  ASSERT_TRUE(model.ok()) << model.status();
  auto* gpt = dynamic_cast<Gpt*>(model->get());
  ASSERT_NE(gpt, nullptr);
  EXPECT_TRUE(gpt->config().activation_checkpointing);
  Tensor idx = RandInt({1, 4}, 0, 11, Options(DType::kInt64), &gen);
  EXPECT_EQ(CountNodes(gpt->Forward(idx), "CheckpointBackward"), 2);
}

}  // namespace
}  // namespace trainyard::nn
