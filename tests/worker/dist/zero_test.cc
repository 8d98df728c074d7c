// ZeroOptimizer over real Gloo groups on loopback, one thread per rank, against an unsharded
// optimizer in one process.
#include "worker/dist/zero.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "tests/testing/dist.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/hooks.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/generator.h"

// Real groups need Gloo; a build without it (the GPU check machines) has no such tests.
#ifdef TY_HAVE_GLOO

namespace trainyard::dist {
namespace {

using trainyard::testing::RunRanks;

// Three parameters of odd sizes, the same on every rank.
std::vector<NamedTensor> MakeParams() {
  Generator gen(5);
  std::vector<NamedTensor> params;
  for (auto [name, shape] : std::vector<std::pair<const char*, Shape>>{
           {"a.weight", Shape{7, 5}}, {"a.bias", Shape{7}}, {"b.weight", Shape{3, 7}}}) {
    Tensor t = Randn(shape, {}, &gen);
    t.set_requires_grad(true);
    params.emplace_back(name, t);
  }
  return params;
}

// x: (4, 5) -> loss, a function of every parameter.
Tensor Loss(const std::vector<NamedTensor>& p, const Tensor& x) {
  Tensor h = ops::Linear(x, p[0].second, p[1].second);
  return ops::Mean(ops::Mul(ops::Linear(h, p[2].second), ops::Linear(h, p[2].second)));
}

Tensor Input(int rank, int step) {
  Generator gen(1000 * step + rank);
  return Randn(Shape{4, 5}, {}, &gen);
}

StatusOr<std::unique_ptr<optim::Optimizer>> MakeAdamW(std::vector<optim::NamedTensor> p) {
  ASSIGN_OR_RETURN(auto opt, optim::AdamW::Create(std::move(p), {0.01, 0.9, 0.99, 1e-8, 0.1}));
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
}

// `steps` AdamW steps in one process on the mean loss over `world` ranks' inputs.
std::vector<NamedTensor> Reference(int world, int steps, std::vector<NamedTensor>* state) {
  std::vector<NamedTensor> params = MakeParams();
  auto opt = MakeAdamW(params);
  EXPECT_TRUE(opt.ok());
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(autograd::Backward(ops::MulScalar(Loss(params, Input(r, s)), 1.0 / world)).ok());
    }
    (*opt)->Step();
    (*opt)->ZeroGrad();
  }
  *state = (*opt)->StateDict();
  return params;
}

void ExpectClose(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto a = ToVector<double>(got), b = ToVector<double>(want);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << what << "[" << i << "]";
  }
}

struct Rank {
  std::vector<NamedTensor> params = MakeParams();
  std::unique_ptr<Reducer> reducer;
  std::unique_ptr<ZeroOptimizer> zero;

  // `stage` 1 or 2 (the reducer releases its buckets).
  explicit Rank(std::shared_ptr<ProcessGroup> group, int stage = 1) {
    ReducerOptions options;
    options.shard_gradients = true;
    options.release_buckets = stage == 2;
    options.first_bucket_bytes = 100;  // several buckets
    options.bucket_bytes = 100;
    auto r = Reducer::Create(params, std::move(group), options);
    EXPECT_TRUE(r.ok()) << r.status();
    reducer = std::move(*r);
    auto z = ZeroOptimizer::Create(reducer.get(), MakeAdamW);
    EXPECT_TRUE(z.ok()) << z.status();
    zero = std::move(*z);
  }
  // What a resumed run does: weights in place, then the unsharded state dict.
  void Restore(const std::vector<NamedTensor>& weights, const std::vector<NamedTensor>& state) {
    for (size_t k = 0; k < params.size(); ++k) CopyInto(params[k].second, weights[k].second);
    ASSERT_TRUE(zero->LoadStateDict(state).ok());
  }
  // `micro` micro-batches per step: rank r of w takes inputs r, r + w, ... of the step's.
  void Train(int rank, int first_step, int steps, int micro = 1) {
    const int world = reducer->group().size();
    for (int s = first_step; s < first_step + steps; ++s) {
      for (int m = 0; m < micro; ++m) {
        reducer->set_sync(m == micro - 1);
        reducer->Prepare();
        Tensor loss = ops::MulScalar(Loss(params, Input(rank + m * world, s)), 1.0 / micro);
        ASSERT_TRUE(autograd::Backward(loss).ok());
        ASSERT_TRUE(reducer->Finish().ok());
      }
      ASSERT_TRUE(zero->Step().ok());
    }
  }
};

class ZeroStageTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroStageTest, StepsLikeOneUnshardedOptimizerAndSavesItsStateDict) {
  const int world = 3, steps = 4;
  std::vector<NamedTensor> want_state;
  const std::vector<NamedTensor> want = Reference(world, steps, &want_state);
  RunRanks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Rank r(group, GetParam());
    ASSERT_GE(r.reducer->buckets().size(), 2u);
    r.Train(rank, 0, steps);
    for (size_t k = 0; k < want.size(); ++k) {
      ExpectClose(r.params[k].second, want[k].second, want[k].first);
    }
    // The gathered state is what the unsharded optimizer writes: same keys, shapes, values.
    auto state = r.zero->StateDict();
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_EQ(state->size(), want_state.size());
    for (size_t i = 0; i < want_state.size(); ++i) {
      EXPECT_EQ((*state)[i].first, want_state[i].first);
      ExpectClose((*state)[i].second, want_state[i].second, want_state[i].first);
    }
  });
}

// Two micro-batches per step: stage 1 accumulates whole gradients and reduces the last; stage 2
// reduce-scatters each micro-batch and adds into the shards.
TEST_P(ZeroStageTest, AccumulatesMicroBatchesLikeOneProcess) {
  const int world = 2, steps = 3;
  std::vector<NamedTensor> want_state;
  const std::vector<NamedTensor> want = Reference(2 * world, steps, &want_state);
  RunRanks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Rank r(group, GetParam());
    r.Train(rank, 0, steps, /*micro=*/2);
    for (size_t k = 0; k < want.size(); ++k) {
      ExpectClose(r.params[k].second, want[k].second, want[k].first);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroStageTest, ::testing::Values(1, 2));

// Stage 2 keeps no whole gradient: during backward at most kLiveBuckets launched buffers and
// the one filling exist; after Finish none, no parameter has a .grad, and the shards hold the
// averaged gradient. A chain of 8 matrices, one bucket each.
TEST(ZeroOptimizerTest, StageTwoReleasesEachBucketOnceReduced) {
  auto chain = [] {
    Generator gen(9);
    std::vector<NamedTensor> params;
    for (int i = 0; i < 8; ++i) {
      Tensor w = Randn(Shape{4, 4}, {}, &gen);
      w.set_requires_grad(true);
      params.emplace_back("w" + std::to_string(i), w);
    }
    return params;
  };
  auto loss = [](const std::vector<NamedTensor>& params, int rank) {
    Generator gen(rank);
    Tensor h = Randn(Shape{2, 4}, {}, &gen);
    for (const auto& [name, w] : params) h = ops::Matmul(h, w);
    return ops::Mean(ops::Mul(h, h));
  };
  std::vector<NamedTensor> want = chain();  // the average of both ranks' gradients
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(autograd::Backward(ops::MulScalar(loss(want, rank), 0.5)).ok());
  }
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    std::vector<NamedTensor> params = chain();
    ReducerOptions options;
    options.shard_gradients = options.release_buckets = true;
    options.first_bucket_bytes = options.bucket_bytes = 64;
    auto reducer = Reducer::Create(params, group, options);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    const std::vector<Bucket>& buckets = (*reducer)->buckets();
    ASSERT_EQ(buckets.size(), 8u);
    size_t most_alive = 0;
    auto count_alive = [&](const Tensor&) {
      size_t alive = 0;
      for (const Bucket& b : buckets) alive += b.buffer.defined() ? 1 : 0;
      most_alive = std::max(most_alive, alive);
    };
    for (auto& [name, p] : params) autograd::RegisterPostAccumulateGradHook(p, count_alive);
    (*reducer)->Prepare();
    ASSERT_TRUE(autograd::Backward(loss(params, rank)).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());
    EXPECT_GE(most_alive, 1u);
    EXPECT_LE(most_alive, kLiveBuckets + 1);
    for (size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_FALSE(buckets[b].buffer.defined()) << "bucket " << b;
      const size_t k = buckets[b].params.front();
      EXPECT_FALSE(params[k].second.grad().defined()) << params[k].first;
      const Tensor g = ops::Reshape(want[k].second.grad(), Shape{16});
      ExpectClose(buckets[b].shard, ops::Slice(g, 0, 8 * rank, 8 * rank + 8), params[k].first);
    }
  });
}

TEST(ZeroOptimizerTest, HoldsAShareOfTheStateAndResumesOnAnotherWorldSize) {
  std::vector<NamedTensor> want_state;
  const std::vector<NamedTensor> want = Reference(2, 6, &want_state);
  // Three steps on two ranks; the state dict resumes on three ranks, then on two again.
  std::vector<NamedTensor> saved, saved_params;
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Rank r(group);
    r.Train(rank, 0, 3);
    auto state = r.zero->StateDict();
    ASSERT_TRUE(state.ok()) << state.status();
    // Adam keeps two moments per element: each of two ranks holds half (and some padding).
    const int64_t full = 2 * (35 + 7 + 21) * 4;
    EXPECT_GE(r.zero->state_bytes(), full / 2);
    EXPECT_LE(r.zero->state_bytes(), full / 2 + 2 * 4 * int64_t(r.reducer->buckets().size()));
    if (rank == 0) {
      saved = *state;
      for (auto& [name, t] : r.params)
        saved_params.emplace_back(name, ConvertTo(t, t.dtype(), true));
    }
  });
  RunRanks(3, [&](int, std::shared_ptr<ProcessGroup> group) {
    Rank r(group);
    r.Restore(saved_params, saved);
    auto again = r.zero->StateDict();
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(again->size(), saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_EQ((*again)[i].first, saved[i].first);
      ExpectClose((*again)[i].second, saved[i].second, saved[i].first);
    }
  });
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Rank r(group);
    r.Restore(saved_params, saved);
    r.Train(rank, 3, 3);
    for (size_t k = 0; k < want.size(); ++k) {
      ExpectClose(r.params[k].second, want[k].second, want[k].first);
    }
  });
}

TEST(ZeroOptimizerTest, ClipsByTheNormOfTheWholeAveragedGradient) {
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Rank r(group);
    r.reducer->Prepare();
    ASSERT_TRUE(autograd::Backward(Loss(r.params, Input(rank, 0))).ok());
    ASSERT_TRUE(r.reducer->Finish().ok());
    // The unsharded norm, from the same averaged gradients computed in one process.
    std::vector<NamedTensor> p = MakeParams();
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(autograd::Backward(ops::MulScalar(Loss(p, Input(k, 0)), 0.5)).ok());
    }
    double sq = 0;
    for (auto& [name, t] : p) {
      for (float g : ToVector<float>(t.grad())) sq += double(g) * g;
    }
    auto norm = r.zero->ClipGradNorm(1e-3);
    ASSERT_TRUE(norm.ok()) << norm.status();
    EXPECT_NEAR(*norm, std::sqrt(sq), 1e-5 * std::sqrt(sq));
    double clipped = 0;
    for (const Bucket& b : r.reducer->buckets()) {
      for (float g : ToVector<float>(b.shard)) clipped += double(g) * g;
    }
    EXPECT_LT(std::sqrt(clipped), 1e-3);  // this rank's share of a norm clipped to 1e-3
  });
}

TEST(ZeroOptimizerTest, NeedsAReducerThatShardsGradients) {
  RunRanks(1, [&](int, std::shared_ptr<ProcessGroup> group) {
    auto reducer = Reducer::Create(MakeParams(), group);
    ASSERT_TRUE(reducer.ok());
    auto z = ZeroOptimizer::Create(reducer->get(), MakeAdamW);
    EXPECT_EQ(z.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(z.status().message(), ::testing::HasSubstr("shard_gradients"));
  });
}

}  // namespace
}  // namespace trainyard::dist

#endif  // TY_HAVE_GLOO
