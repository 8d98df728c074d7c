// What one bf16 GPT training step launches on a device, per transformer block, counted by
// HostBackend: which kernels the step takes (every product on bf16 tensor cores, the fused
// attention), where the host waits for the device, and how many copies each block makes. A
// GPU step's time beyond its products is mostly these launches and passes over memory, so a
// change that adds one (an op falling off its fused path, a stray contiguous copy, a host read
// in backward) fails here, on machines without a GPU. Per-block counts are the difference of a
// 3-block and a 2-block model, so embeddings, head, loss and optimizer cancel out.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <memory>
#include <string>

#include "tests/testing/host_backend.h"
#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/nn/gpt.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"

namespace trainyard {
namespace {

enum Phase { kForward, kBackward, kOptimizer };
// Launches per kernel name and phase of one step.
using Launches = std::map<std::string, std::array<int64_t, 3>>;

constexpr const char* kKernels[] = {"Copy",
                                    "Sync",
                                    "Memcpy.to_host",
                                    "CheckIndices",
                                    "Gemm",
                                    "Gemm.bf16",
                                    "AttentionForward",
                                    "AttentionBackward",
                                    "LayerNormForward",
                                    "LayerNormBackward",
                                    "Binary",
                                    "ReduceSum"};

// The second step (the first creates AdamW's state) of a bf16-autocast GPT with `layers`
// blocks on a HostBackend device, as cuda_bench gpt2 runs it: forward and loss, backward,
// AdamW step and zero_grad, loss.item().
Launches StepLaunches(int layers) {
  testing::HostBackend backend;
  SetCudaBackendForTesting(&backend);
  Launches out;
  {
    const Device dev = Device::Cuda(0);
    Generator gen(1);
    nn::GptConfig config;
    config.n_layer = layers;
    config.n_embd = 32;
    config.n_head = 2;
    config.context = 16;
    config.vocab_size = 53;
    config.dropout = 0;
    config.bias = true;
    auto model = std::make_shared<nn::Gpt>(config, &gen);
    model->Train(true);
    EXPECT_TRUE(model->To(dev).ok());
    const nn::NamedTensors named = model->NamedParameters();
    auto opt = optim::AdamW::Create({named.begin(), named.end()}, optim::AdamWOptions{});
    EXPECT_TRUE(opt.ok()) << opt.status();
    const int64_t b = 2, t = config.context;
    const Tensor tokens = RandInt({b, t + 1}, 0, config.vocab_size, Options(DType::kInt64), &gen);
    const Tensor input = CopyToDevice(ops::Narrow(tokens, 1, 0, t), dev);
    const Tensor target = CopyToDevice(ops::Narrow(tokens, 1, 1, t), dev);
    for (int step = 0; step < 2; ++step) {
      // Adds (sign 1) or subtracts (-1) the counts so far into `phase`, on the measured step.
      auto mark = [&](Phase phase, int sign) {
        if (step == 0) return;
        for (const char* k : kKernels) out[k][phase] += sign * backend.launches(k);
      };
      mark(kForward, -1);
      Tensor loss;
      {
        AutocastGuard autocast(DType::kBFloat16);
        const Tensor logits = model->Forward(input);
        loss = ops::CrossEntropy(ops::Reshape(logits, {b * t, config.vocab_size}),
                                 ops::Reshape(target, {b * t}));
      }
      mark(kForward, 1), mark(kBackward, -1);
      EXPECT_TRUE(autograd::Backward(loss).ok());
      mark(kBackward, 1), mark(kOptimizer, -1);
      (*opt)->Step();
      (*opt)->ZeroGrad(/*set_to_none=*/true);
      loss.item();
      mark(kOptimizer, 1);
    }
  }
  SetCudaBackendForTesting(nullptr);
  return out;
}

class GptStepLaunchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    two_ = StepLaunches(2);
    three_ = StepLaunches(3);
  }
  // One block's launches of `kernel` in `phase`.
  static int64_t PerBlock(const char* kernel, Phase phase) {
    return three_[kernel][phase] - two_[kernel][phase];
  }
  static inline Launches two_, three_;
};

TEST_F(GptStepLaunchTest, EveryProductRunsInBf16AndAttentionTakesTheFusedKernels) {
  // Forward: qkv, attention projection, MLP up and down; backward: two products for each.
  EXPECT_EQ(PerBlock("Gemm", kForward), 4);
  EXPECT_EQ(PerBlock("Gemm.bf16", kForward), 4);
  EXPECT_EQ(PerBlock("Gemm", kBackward), 8);
  EXPECT_EQ(PerBlock("Gemm.bf16", kBackward), 8);
  EXPECT_EQ(PerBlock("AttentionForward", kForward), 1);
  EXPECT_EQ(PerBlock("AttentionBackward", kBackward), 1);
  EXPECT_EQ(PerBlock("LayerNormForward", kForward), 2);
  EXPECT_EQ(PerBlock("LayerNormBackward", kBackward), 2);
  // The two residual adds; in backward, the two sums of gradients where the stream branches.
  EXPECT_EQ(PerBlock("Binary", kForward), 2);
  EXPECT_EQ(PerBlock("Binary", kBackward), 2);
  // The four biases' gradients.
  EXPECT_EQ(PerBlock("ReduceSum", kBackward), 4);
}

TEST_F(GptStepLaunchTest, TheHostWaitsOnlyToReadTheLoss) {
  for (const char* wait : {"Memcpy.to_host", "Sync"}) {
    for (Phase phase : {kForward, kBackward, kOptimizer}) {
      EXPECT_EQ(PerBlock(wait, phase), 0) << wait << " in phase " << phase;
    }
    const std::array<int64_t, 3>& step = two_[wait];
    EXPECT_EQ(step[kForward], 0) << wait << ": the range checks run on the device";
    EXPECT_EQ(step[kBackward], 0) << wait;
    EXPECT_EQ(step[kOptimizer], 1) << wait << ": loss.item()";
  }
  // The token ids' and the targets' range checks (Note [Deferred index checks]).
  EXPECT_EQ(two_["CheckIndices"][kForward], 2);
  EXPECT_EQ(PerBlock("CheckIndices", kForward), 0);
}

// Note [Copies per block]
// Forward (10): the two layer norms' f32 outputs cast to bf16 for the products (2) and the four
// weights and four biases cast to bf16 (8). Backward (12): the eight parameter gradients cast
// to f32 (8), the residual gradients cast to bf16 for the branches (2) and the branches'
// gradients to f32 for the layer norms (2). The residual adds read the bf16 branch outputs as
// they are (ops::Add, device::BinaryMixed). The fused attention reads q, k, v and its output's
// gradient where they are, strided in the qkv product and the heads-side-by-side output; it
// lays out its output so that putting the heads side by side is a view, and dq, dk, dv as one
// array laid out as the qkv product, which the product's split hands on whole (ops/attention.cc
// PackedSlices, ops/indexing.cc PiecesAsOne). PyTorch eager makes the same casts, and copies
// more: its split's backward concatenates dq, dk and dv.
TEST_F(GptStepLaunchTest, EachBlockMakesTheCopiesItemisedInTheNote) {
  EXPECT_EQ(PerBlock("Copy", kForward), 10);
  EXPECT_EQ(PerBlock("Copy", kBackward), 12);
  EXPECT_EQ(PerBlock("Copy", kOptimizer), 0);
}

// Outside the blocks, forward (3): the final layer norm's output and the tied token embedding
// cast to bf16 for the head, and cross-entropy's count of targets (bool to f32). Backward (4):
// the head's two gradients cast to f32, the loss's gradient spread over the rows, and the
// position embedding's slice. Cross-entropy reads the bf16 logits as they are: no f32 copy of
// the step's largest tensor, forward or backward (ops::CrossEntropy).
TEST_F(GptStepLaunchTest, OutsideTheBlocksTheStepMakesTheItemisedCopies) {
  EXPECT_EQ(two_["Copy"][kForward] - 2 * PerBlock("Copy", kForward), 3);
  EXPECT_EQ(two_["Copy"][kBackward] - 2 * PerBlock("Copy", kBackward), 4);
}

}  // namespace
}  // namespace trainyard
