// ShardedUnits (ZeRO-3) over real Gloo groups on loopback, one thread per rank: what a rank
// holds between uses, gathering (and prefetching) and releasing, and a training step through
// RunUnit, the reducer and ZeroOptimizer against one unsharded optimizer.
#include "worker/dist/fsdp.h"

#include <gtest/gtest.h>

#include "tests/testing/dist.h"
#include "worker/autograd/engine.h"
#include "worker/dist/zero.h"
#include "worker/ops/activation.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/reduction.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/generator.h"

#ifdef TY_HAVE_GLOO

namespace trainyard::dist {
namespace {

using trainyard::testing::RunRanks;

// Three layers: unit 0 (the root) holds the last, units 1 and 2 the first two.
std::vector<NamedTensor> MakeParams() {
  Generator gen(7);
  std::vector<NamedTensor> params;
  for (int i = 0; i < 3; ++i) {
    Tensor w = Randn(Shape{5, 5}, {}, &gen), b = Randn(Shape{5}, {}, &gen);
    params.emplace_back("w" + std::to_string(i), w.set_requires_grad(true));
    params.emplace_back("b" + std::to_string(i), b.set_requires_grad(true));
  }
  return params;
}
const std::vector<std::vector<size_t>> kUnits = {{4, 5}, {0, 1}, {2, 3}};

Tensor Layer(const std::vector<NamedTensor>& p, int i, const Tensor& x) {
  return ops::Tanh(ops::Linear(x, p[2 * i].second, p[2 * i + 1].second));
}

Tensor Input(int rank, int step) {
  Generator gen(100 * step + rank);
  return Randn(Shape{3, 5}, {}, &gen);
}

// The model's forward with each layer run as its unit: the root around everything.
Tensor Forward(ShardedUnits& units, const std::vector<NamedTensor>& p, const Tensor& x) {
  return units.RunUnit(0, x, [&](const Tensor& in) {
    Tensor h = units.RunUnit(1, in, [&](const Tensor& t) { return Layer(p, 0, t); });
    h = units.RunUnit(2, h, [&](const Tensor& t) { return Layer(p, 1, t); });
    return Layer(p, 2, h);
  });
}

Tensor Loss(const Tensor& y) { return ops::Mean(ops::Mul(y, y)); }

StatusOr<std::unique_ptr<optim::Optimizer>> MakeSgd(std::vector<optim::NamedTensor> p) {
  ASSIGN_OR_RETURN(auto opt, optim::SGD::Create(std::move(p), {0.1, 0.9}));
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
}

TEST(ShardedUnitsTest, KeepsItsChunksAndGathersAndReleasesWholeUnits) {
  const std::vector<NamedTensor> want = MakeParams();
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    std::vector<NamedTensor> params = MakeParams();
    auto units = ShardedUnits::Create(params, kUnits, group);
    ASSERT_TRUE(units.ok()) << units.status();
    // Released: no weight memory but the chunks (unit 1 is w0 and b0: 30 elements, 15 each).
    for (const auto& [name, p] : params) EXPECT_EQ(p.storage()->nbytes(), 0u) << name;
    EXPECT_EQ((*units)->shard(1).numel(), 15);
    const std::vector<float> w0 = ToVector<float>(want[0].second);
    std::vector<float> flat = w0;  // unit 1 laid out: w0, then b0
    for (float b : ToVector<float>(want[1].second)) flat.push_back(b);
    const std::vector<float> chunk = ToVector<float>((*units)->shard(1));
    for (int i = 0; i < 15; ++i) EXPECT_EQ(chunk[i], flat[15 * rank + i]);
    ASSERT_TRUE((*units)->Gather(1).ok());
    EXPECT_EQ(ToVector<float>(params[0].second), w0);
    EXPECT_EQ(ToVector<float>(params[1].second), ToVector<float>(want[1].second));
    EXPECT_EQ(params[2].second.storage()->nbytes(), 0u);  // unit 2 was not gathered
    (*units)->Release(1);
    EXPECT_EQ(params[0].second.storage()->nbytes(), 0u);
    // A prefetch is waited for by the gather; both units are held at once.
    (*units)->Prefetch(2);
    ASSERT_TRUE((*units)->Gather(0).ok());
    ASSERT_TRUE((*units)->Gather(2).ok());
    EXPECT_EQ(ToVector<float>(params[4].second), ToVector<float>(want[4].second));
    EXPECT_EQ(ToVector<float>(params[2].second), ToVector<float>(want[2].second));
    (*units)->Release(0);
    (*units)->Release(2);
    EXPECT_EQ(params[4].second.storage()->nbytes(), 0u);
    EXPECT_EQ((*units)->peak_gathered_bytes(), 2 * 30 * 4);
  });
}

// Three SGD steps with momentum on two ranks, each unit gathered for its forward and again
// for its backward and released once its gradients are reduce-scattered, equal three steps of
// one process on both ranks' inputs; Unshard makes the model whole.
TEST(ShardedUnitsTest, TrainsLikeOneProcess) {
  std::vector<NamedTensor> want = MakeParams();
  auto opt = MakeSgd(want);
  ASSERT_TRUE(opt.ok());
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      Tensor y = Layer(want, 2, Layer(want, 1, Layer(want, 0, Input(r, step))));
      ASSERT_TRUE(autograd::Backward(ops::MulScalar(Loss(y), 0.5)).ok());
    }
    (*opt)->Step();
    (*opt)->ZeroGrad();
  }
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    std::vector<NamedTensor> params = MakeParams();
    auto units = ShardedUnits::Create(params, kUnits, group);
    ASSERT_TRUE(units.ok()) << units.status();
    ShardedUnits* u = units->get();
    ReducerOptions options;
    options.shard_gradients = options.release_buckets = true;
    options.plan = {kUnits[2], kUnits[1], kUnits[0]};
    options.on_launch = [u](size_t bucket) { u->Release(2 - bucket); };
    auto reducer = Reducer::Create(params, group, options);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    auto zero =
        ZeroOptimizer::Create(reducer->get(), MakeSgd, {u->shard(2), u->shard(1), u->shard(0)});
    ASSERT_TRUE(zero.ok()) << zero.status();
    for (int step = 0; step < 3; ++step) {
      (*reducer)->Prepare();
      ASSERT_TRUE(autograd::Backward(Loss(Forward(*u, params, Input(rank, step)))).ok());
      ASSERT_TRUE((*reducer)->Finish().ok());
      ASSERT_TRUE(u->TakeError().ok());
      for (const auto& [name, p] : params) EXPECT_EQ(p.storage()->nbytes(), 0u) << name;
      ASSERT_TRUE((*zero)->Step().ok());
    }
    // Unsharded, each parameter holds its weights in a storage of its own, for good.
    ASSERT_TRUE(u->Unshard().ok());
    u->Release(0);
    for (size_t k = 0; k < params.size(); ++k) {
      const Tensor& p = params[k].second;
      EXPECT_EQ(p.storage()->nbytes(), static_cast<size_t>(p.numel()) * sizeof(float));
      const std::vector<float> got = ToVector<float>(params[k].second);
      const std::vector<float> ref = ToVector<float>(want[k].second);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << want[k].first << i;
      }
    }
  });
}

TEST(ShardedUnitsTest, RefusesUnitsThatDoNotCoverEveryParameterOnce) {
  RunRanks(1, [&](int, std::shared_ptr<ProcessGroup> group) {
    auto missing = ShardedUnits::Create(MakeParams(), {{0, 1, 2, 3}}, group);
    EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(missing.status().message().find("w2 is in no unit"), std::string::npos)
        << missing.status();
    auto twice = ShardedUnits::Create(MakeParams(), {{0, 1, 2, 3, 4, 5}, {5}}, group);
    EXPECT_NE(twice.status().message().find("index 5"), std::string::npos) << twice.status();
  });
}

}  // namespace
}  // namespace trainyard::dist

#endif  // TY_HAVE_GLOO
