// RunPipelineStep over real Gloo pair groups on loopback, one thread per stage: each stage's
// gradients equal one process's over the same micro-batches, for GPipe and 1F1B on 2 and 3
// stages, over two steps.
#include "worker/dist/pipeline.h"

#include <gtest/gtest.h>

#include <thread>

#include "worker/autograd/engine.h"
#include "worker/dist/store.h"
#include "worker/ops/activation.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/reduction.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/generator.h"

#ifdef TY_HAVE_GLOO

namespace trainyard::dist {
namespace {

constexpr int kMicroBatches = 4;

// Stage s's layer: a 4x4 Linear and tanh.
Tensor Weight(int stage) {
  Generator gen(10 + stage);
  return Randn(Shape{4, 4}, {}, &gen).set_requires_grad(true);
}

Tensor Input(int step, int m) {
  Generator gen(100 * step + m);
  return Randn(Shape{3, 4}, {}, &gen);
}

Tensor Layer(const Tensor& w, const Tensor& x) { return ops::Tanh(ops::Linear(x, w, Tensor())); }

// The micro-batch's loss, weighted to average over the step's micro-batches.
Tensor Loss(const Tensor& y) {
  return ops::MulScalar(ops::Mean(ops::Mul(y, y)), 1.0 / kMicroBatches);
}

// Calls fn(stage, prev, next) on `stages` threads, each stage joined to a group of two with
// each neighbour.
void RunStages(int stages, const std::function<void(int, std::shared_ptr<ProcessGroup>,
                                                    std::shared_ptr<ProcessGroup>)>& fn) {
  auto server = TcpStoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto pair = [&](std::shared_ptr<Store> store, int left, int rank) {
    ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(10);
    auto scoped = std::make_shared<PrefixStore>("pair" + std::to_string(left) + "/", store);
    auto group = CreateProcessGroup("gloo", scoped, rank, 2, options);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? std::shared_ptr<ProcessGroup>(std::move(*group)) : nullptr;
  };
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    threads.emplace_back([&, s] {
      auto store = TcpStore::Connect((*server)->address(), std::chrono::seconds(5));
      ASSERT_TRUE(store.ok()) << store.status();
      std::shared_ptr<ProcessGroup> prev = s > 0 ? pair(*store, s - 1, 1) : nullptr;
      std::shared_ptr<ProcessGroup> next = s + 1 < stages ? pair(*store, s, 0) : nullptr;
      fn(s, prev, next);
    });
  }
  for (std::thread& t : threads) t.join();
}

void ExpectPipelineMatchesOneProcess(int stages, bool one_f_one_b) {
  SCOPED_TRACE(std::to_string(stages) + " stages, " + (one_f_one_b ? "1F1B" : "GPipe"));
  // One process: every micro-batch through every layer, two steps' gradients summed.
  std::vector<Tensor> want;
  for (int s = 0; s < stages; ++s) want.push_back(Weight(s));
  for (int step = 0; step < 2; ++step) {
    for (int m = 0; m < kMicroBatches; ++m) {
      Tensor h = Input(step, m);
      for (const Tensor& w : want) h = Layer(w, h);
      ASSERT_TRUE(autograd::Backward(Loss(h)).ok());
    }
  }
  RunStages(stages, [&](int s, std::shared_ptr<ProcessGroup> prev,
                        std::shared_ptr<ProcessGroup> next) {
    const Tensor w = Weight(s);
    PipelineOptions options;
    options.stage = s;
    options.stages = stages;
    options.prev = prev;
    options.next = next;
    options.activation_shape = [](int) { return Shape{3, 4}; };
    options.one_f_one_b = one_f_one_b;
    int backwards = 0;
    for (int step = 0; step < 2; ++step) {
      PipelineCallbacks callbacks;
      callbacks.forward = [&](int m, const Tensor& input) -> StatusOr<Tensor> {
        Tensor y = Layer(w, s == 0 ? Input(step, m) : input);
        return s == stages - 1 ? Loss(y) : y;
      };
      callbacks.after_backward = [&](int) {
        ++backwards;
        return OkStatus();
      };
      StatusOr<PipelineStats> stats = RunPipelineStep(options, kMicroBatches, callbacks);
      ASSERT_TRUE(stats.ok()) << "stage " << s << ": " << stats.status();
      EXPECT_GT(stats->wall_seconds, 0);
      EXPECT_GE(stats->bubble(), 0);
      EXPECT_LT(stats->bubble(), 1);
    }
    EXPECT_EQ(backwards, 2 * kMicroBatches);
    const std::vector<float> got = ToVector<float>(w.grad()), ref = ToVector<float>(want[s].grad());
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], ref[i], 1e-6 * (1 + std::abs(ref[i])))
          << "stage " << s << " [" << i << "]";
    }
  });
}

TEST(PipelineTest, StagesComputeTheGradientsOfOneProcess) {
  for (int stages : {2, 3}) {
    for (bool one_f_one_b : {true, false}) ExpectPipelineMatchesOneProcess(stages, one_f_one_b);
  }
}

TEST(PipelineTest, RefusesAStageWithoutItsNeighboursGroups) {
  PipelineOptions options;
  options.stage = 1;
  options.stages = 2;
  PipelineCallbacks callbacks;
  callbacks.forward = [](int, const Tensor& x) -> StatusOr<Tensor> { return x; };
  StatusOr<PipelineStats> s = RunPipelineStep(options, 4, callbacks);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("stage 1 needs a group of two with each neighbour"),
            std::string::npos)
      << s.status();
  options.stage = 2;
  EXPECT_NE(RunPipelineStep(options, 4, callbacks).status().message().find("stage 2 is not one"),
            std::string::npos);
}

TEST(PipelineTest, TheTheoreticalBubbleIsPMinusOneOverMPlusPMinusOne) {
  EXPECT_DOUBLE_EQ(TheoreticalBubble(2, 4), 1.0 / 5);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(1, 8), 0);
}

}  // namespace
}  // namespace trainyard::dist

#endif  // TY_HAVE_GLOO
