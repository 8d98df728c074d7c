// Reducer over real Gloo groups on loopback, one thread per rank.
#include "worker/dist/reducer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "tests/testing/dist.h"
#include "tests/testing/host_backend.h"
#include "tests/testing/host_staged_group.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/hooks.h"
#include "worker/ops/activation.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/generator.h"

// Real groups need Gloo; a build without it (the GPU check machines) has no such tests.
#ifdef TY_HAVE_GLOO

namespace trainyard::dist {
namespace {

using ::testing::HasSubstr;

using trainyard::testing::RunRanks;

// A two-layer perceptron whose weights are the same on every rank (seeded).
struct TinyNet {
  std::vector<NamedTensor> params;
  explicit TinyNet(int64_t in = 6, int64_t hidden = 40, int64_t out = 3) {
    Generator gen(7);
    auto make = [&](const char* name, Shape shape) {
      Tensor t = Randn(shape, {}, &gen);
      t.set_requires_grad(true);
      params.emplace_back(name, t);
    };
    make("fc1.weight", Shape{hidden, in});
    make("fc1.bias", Shape{hidden});
    make("fc2.weight", Shape{out, hidden});
    make("fc2.bias", Shape{out});
  }
  // x: (B, in)
  Tensor Loss(const Tensor& x) const {
    Tensor h = ops::Tanh(ops::Linear(x, params[0].second, params[1].second));
    Tensor y = ops::Linear(h, params[2].second, params[3].second);
    return ops::Mean(ops::Mul(y, y));
  }
};

Tensor BatchFor(int rank, int64_t rows = 5) {
  Generator gen(100 + rank);
  return Randn(Shape{rows, 6}, {}, &gen);
}

// The mean over ranks of each parameter's gradient, computed in one process.
std::vector<std::vector<float>> ExpectedMeanGrads(int n) {
  TinyNet net;
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(autograd::Backward(ops::MulScalar(net.Loss(BatchFor(r)), 1.0 / n)).ok());
  }
  std::vector<std::vector<float>> grads;
  for (const NamedTensor& p : net.params) grads.push_back(ToVector<float>(p.second.grad()));
  return grads;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
  }
}

TEST(ReducerTest, PlansBucketsInReverseOrderWithASmallFirstBucket) {
  TinyNet net(6, 40, 3);  // 960 + 160 + 480 + 12 bytes
  auto plan = PlanBuckets(net.params, /*first=*/500, /*bucket=*/1200);
  // fc2.bias (12) + fc2.weight (480) fit the first 500 bytes; fc1.bias + fc1.weight (1120) the
  // next.
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_THAT(plan[0], ::testing::ElementsAre(3, 2));
  EXPECT_THAT(plan[1], ::testing::ElementsAre(1, 0));
  // A parameter larger than any bucket gets one of its own.
  auto small = PlanBuckets(net.params, 100, 100);
  EXPECT_EQ(small.size(), 4u);
}

TEST(ReducerTest, AveragesGradientsAcrossRanksThroughBucketViews) {
  for (int n : {2, 3}) {
    const auto want = ExpectedMeanGrads(n);
    RunRanks(n, [&](int rank, std::shared_ptr<ProcessGroup> group) {
      TinyNet net;
      ReducerOptions options;
      options.first_bucket_bytes = 256;
      options.bucket_bytes = 1024;
      auto reducer = Reducer::Create(net.params, group, options);
      ASSERT_TRUE(reducer.ok()) << reducer.status();
      ASSERT_GE((*reducer)->buckets().size(), 2u);
      (*reducer)->Prepare();
      ASSERT_TRUE(autograd::Backward(net.Loss(BatchFor(rank))).ok());
      ASSERT_TRUE((*reducer)->Finish().ok());
      for (size_t k = 0; k < net.params.size(); ++k) {
        const Tensor g = net.params[k].second.grad();
        // The gradient is a view into its bucket's buffer, not a copy.
        bool in_bucket = false;
        for (const Bucket& b : (*reducer)->buckets())
          in_bucket |= g.storage() == b.buffer.storage();
        EXPECT_TRUE(in_bucket) << net.params[k].first;
        ExpectNear(ToVector<float>(g), want[k], 1e-6);
      }
    });
  }
}

TEST(ReducerTest, FirstBucketIsReducedBeforeBackwardEnds) {
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    TinyNet net(64, 256, 10);
    ReducerOptions options;
    options.first_bucket_bytes = 10500;  // fc2's 10 280 bytes
    options.bucket_bytes = 1 << 20;
    auto reducer = Reducer::Create(net.params, group, options);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    ASSERT_THAT((*reducer)->buckets()[0].params, ::testing::ElementsAre(3, 2));
    Generator gen(rank);
    Tensor x = Randn(Shape{32, 64}, {}, &gen);
    Tensor h = ops::Linear(x, net.params[0].second, net.params[1].second);
    Tensor y = ops::Linear(ops::Tanh(h), net.params[2].second, net.params[3].second);
    // Backward reaches h after fc2's gradients: there it waits (at most 5 s) for the first
    // bucket's all-reduce to be running, as it would be while a large layer's backward runs.
    bool seen_running = false;
    autograd::RegisterHook(h, [&](const Tensor&) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < deadline) {
        std::shared_ptr<Work> w = (*reducer)->work(0);
        if (w && w->start_time() != Work::TimePoint{}) {
          seen_running = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      return Tensor();
    });
    (*reducer)->Prepare();
    ASSERT_TRUE(autograd::Backward(ops::Mean(ops::Mul(y, y))).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());
    EXPECT_TRUE(seen_running) << "the first bucket was not launched during backward";
    const ReducerStats& s = (*reducer)->stats();
    EXPECT_EQ(s.buckets_launched_in_backward, 2);
    EXPECT_LT(s.first_start, s.backward_end);
    EXPECT_GT(s.bytes, 0);
    EXPECT_GT(s.bus_bandwidth, 0);
  });
}

TEST(ReducerTest, NoSyncAccumulatesLocallyThenReducesTheSum) {
  // Two micro-batches per rank; the result is the mean over all 2n micro-batch losses / 2.
  const int n = 2;
  TinyNet ref;
  for (int r = 0; r < n; ++r) {
    for (int m = 0; m < 2; ++m) {
      ASSERT_TRUE(autograd::Backward(ops::MulScalar(ref.Loss(BatchFor(10 * r + m)), 0.5 / n)).ok());
    }
  }
  RunRanks(n, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    TinyNet net;
    auto reducer = Reducer::Create(net.params, group);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    (*reducer)->set_sync(false);
    (*reducer)->Prepare();
    ASSERT_TRUE(autograd::Backward(ops::MulScalar(net.Loss(BatchFor(10 * rank)), 0.5)).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());  // no communication
    (*reducer)->set_sync(true);
    (*reducer)->Prepare();
    ASSERT_TRUE(autograd::Backward(ops::MulScalar(net.Loss(BatchFor(10 * rank + 1)), 0.5)).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());
    for (size_t k = 0; k < net.params.size(); ++k) {
      ExpectNear(ToVector<float>(net.params[k].second.grad()),
                 ToVector<float>(ref.params[k].second.grad()), 1e-6);
    }
  });
}

TEST(ReducerTest, AParameterUsedOnlyInAnEarlierMicroBatchIsReduced) {
  // Micro-batch 1 uses the whole net, micro-batch 2 only fc1: fc2's gradient from micro-batch
  // 1 is still this step's and must be averaged, not reported as unused or dropped.
  TinyNet ref;
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(autograd::Backward(ops::MulScalar(ref.Loss(BatchFor(r)), 0.5)).ok());
  }
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    TinyNet net;
    auto reducer = Reducer::Create(net.params, group);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    (*reducer)->set_sync(false);
    (*reducer)->Prepare();
    ASSERT_TRUE(autograd::Backward(net.Loss(BatchFor(rank))).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());
    (*reducer)->set_sync(true);
    (*reducer)->Prepare();
    Tensor h = ops::Tanh(ops::Linear(BatchFor(rank), net.params[0].second, net.params[1].second));
    ASSERT_TRUE(autograd::Backward(ops::MulScalar(ops::Mean(h), 0.0)).ok());
    Status s = (*reducer)->Finish();
    ASSERT_TRUE(s.ok()) << s;
    for (size_t k = 2; k < 4; ++k) {
      ExpectNear(ToVector<float>(net.params[k].second.grad()),
                 ToVector<float>(ref.params[k].second.grad()), 1e-6);
    }
  });
}

void ExpectNamesParametersThatGotNoGradient(bool release);

// Also with release_buckets (ZeRO-2), where fc2's bucket has no buffer until reduced as zeros;
// one bucket per layer (first_bucket_bytes).
TEST(ReducerTest, NamesParametersThatGotNoGradient) {
  for (bool release : {false, true}) {
    SCOPED_TRACE(release ? "release_buckets" : "plain");
    ExpectNamesParametersThatGotNoGradient(release);
  }
}

void ExpectNamesParametersThatGotNoGradient(bool release) {
  RunRanks(2, [&](int, std::shared_ptr<ProcessGroup> group) {
    TinyNet net;
    ReducerOptions options;
    options.shard_gradients = options.release_buckets = release;
    options.first_bucket_bytes = 64;
    auto reducer = Reducer::Create(net.params, group, options);
    ASSERT_TRUE(reducer.ok());
    (*reducer)->Prepare();
    // fc2 is not used.
    Tensor h = ops::Tanh(ops::Linear(BatchFor(0), net.params[0].second, net.params[1].second));
    ASSERT_TRUE(autograd::Backward(ops::Mean(h)).ok());
    Status s = (*reducer)->Finish();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("no gradient in this step: fc2.weight, fc2.bias"));
    EXPECT_THAT(s.message(), HasSubstr("find_unused_parameters"));
  });
}

TEST(ReducerTest, FindUnusedParametersReducesWhatSomeRankUsed) {
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    TinyNet net;
    ReducerOptions options;
    options.find_unused_parameters = true;
    auto reducer = Reducer::Create(net.params, group, options);
    ASSERT_TRUE(reducer.ok());
    (*reducer)->Prepare();
    // Rank 0 uses the whole net; rank 1 skips fc2.
    Tensor x = BatchFor(rank);
    Tensor loss =
        rank == 0
            ? net.Loss(x)
            : ops::Mean(ops::Tanh(ops::Linear(x, net.params[0].second, net.params[1].second)));
    ASSERT_TRUE(autograd::Backward(loss).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());
    // fc2 was used on rank 0 only: both ranks hold half of rank 0's gradient.
    EXPECT_TRUE(net.params[2].second.grad().defined());
  });
  RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    TinyNet net;
    ReducerOptions options;
    options.find_unused_parameters = true;
    auto reducer = Reducer::Create(net.params, group, options);
    ASSERT_TRUE(reducer.ok());
    (*reducer)->Prepare();
    Tensor h = ops::Tanh(ops::Linear(BatchFor(rank), net.params[0].second, net.params[1].second));
    ASSERT_TRUE(autograd::Backward(ops::Mean(h)).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());
    // No rank used fc2: like one process, it keeps no gradient and an optimizer skips it.
    EXPECT_FALSE(net.params[2].second.grad().defined());
    EXPECT_FALSE(net.params[3].second.grad().defined());
    EXPECT_TRUE(net.params[0].second.grad().defined());
  });
}

TEST(ReducerTest, CompressedAllReduceIsCloseToFloat32) {
  const auto want = ExpectedMeanGrads(2);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    RunRanks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
      TinyNet net;
      ReducerOptions options;
      options.compression = dtype;
      auto reducer = Reducer::Create(net.params, group, options);
      ASSERT_TRUE(reducer.ok()) << reducer.status();
      (*reducer)->Prepare();
      ASSERT_TRUE(autograd::Backward(net.Loss(BatchFor(rank))).ok());
      ASSERT_TRUE((*reducer)->Finish().ok());
      EXPECT_EQ((*reducer)->stats().bytes, (*reducer)->buckets()[0].buffer.numel() * 2);
      const double tol = dtype == DType::kBFloat16 ? 1e-2 : 2e-3;
      for (size_t k = 0; k < net.params.size(); ++k) {
        ExpectNear(ToVector<float>(net.params[k].second.grad()), want[k], tol);
      }
    });
  }
}

// Variants: ZeRO-1's reduce-scatter; ZeRO-2's (release_buckets), also compressed to bfloat16,
// and over two backwards, whose shares add up in the shard.
TEST(ReducerTest, ShardModeLeavesEachRankItsChunkOfTheAverage) {
  const int n = 3;
  const auto want = ExpectedMeanGrads(n);
  for (std::string variant : {"shard", "release", "release_bf16", "release_twice"}) {
    SCOPED_TRACE(variant);
    RunRanks(n, [&](int rank, std::shared_ptr<ProcessGroup> group) {
      TinyNet net;
      ReducerOptions options;
      options.shard_gradients = true;
      options.release_buckets = variant != "shard";
      if (variant == "release_bf16") options.compression = DType::kBFloat16;
      auto reducer = Reducer::Create(net.params, group, options);
      ASSERT_TRUE(reducer.ok()) << reducer.status();
      const Bucket& bucket = (*reducer)->buckets()[0];
      ASSERT_EQ(bucket.padded % n, 0);
      const int backwards = variant == "release_twice" ? 2 : 1;
      for (int i = 0; i < backwards; ++i) {
        (*reducer)->Prepare();
        ASSERT_TRUE(autograd::Backward(net.Loss(BatchFor(rank))).ok());
        ASSERT_TRUE((*reducer)->Finish().ok());
      }
      EXPECT_EQ(bucket.buffer.defined(), !options.release_buckets);
      // The step's stats count every backward's reduce-scatter.
      EXPECT_EQ((*reducer)->stats().bytes,
                backwards * bucket.padded * (options.compression ? 2 : 4));
      // Lay the expected gradients out as the bucket does and compare this rank's chunk.
      std::vector<float> flat(bucket.padded, 0.f);
      for (size_t i = 0; i < bucket.params.size(); ++i) {
        const auto& g = want[bucket.params[i]];
        std::copy(g.begin(), g.end(), flat.begin() + bucket.offsets[i]);
      }
      const int64_t chunk = bucket.shard.numel();
      std::vector<float> mine(flat.begin() + rank * chunk, flat.begin() + (rank + 1) * chunk);
      for (float& g : mine) g *= backwards;
      ExpectNear(ToVector<float>(bucket.shard), mine, options.compression ? 1e-2 : 1e-6);
      if (backwards == 1) return;
      // A new step overwrites the shards.
      (*reducer)->ClearShards();
      (*reducer)->Prepare();
      ASSERT_TRUE(autograd::Backward(net.Loss(BatchFor(rank))).ok());
      ASSERT_TRUE((*reducer)->Finish().ok());
      for (float& g : mine) g /= backwards;
      ExpectNear(ToVector<float>(bucket.shard), mine, 1e-6);
      EXPECT_EQ((*reducer)->stats().bytes, bucket.padded * 4);
    });
  }
}

TEST(ReducerTest, BroadcastFromRank0MakesEveryRankEqual) {
  RunRanks(3, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Generator gen(rank);
    Tensor t = Randn(Shape{17, 3}, {}, &gen);
    ASSERT_TRUE(BroadcastFromRank0(*group, {{"w", t}}).ok());
    Generator gen0(0);
    ExpectNear(ToVector<float>(t), ToVector<float>(Randn(Shape{17, 3}, {}, &gen0)), 0);
  });
}

// ---- Parameters on a CUDA device (NCCL's case), on HostBackend's fake one ----

TEST(ReducerTest, ParametersOnACudaDeviceAreAveragedInBucketsOnThatDevice) {
  trainyard::testing::HostBackend backend;
  SetCudaBackendForTesting(&backend);
  const Device cuda = Device::Cuda(0);
  const int n = 2;
  const auto want = ExpectedMeanGrads(n);
  RunRanks(n, [&](int rank, std::shared_ptr<ProcessGroup> gloo) {
    TinyNet net;
    for (const NamedTensor& p : net.params) MoveToDevice(p.second, cuda);
    ReducerOptions options;
    options.first_bucket_bytes = 256;
    options.bucket_bytes = 1024;
    auto reducer = Reducer::Create(
        net.params, std::make_shared<trainyard::testing::HostStagedGroup>(gloo), options);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    ASSERT_GE((*reducer)->buckets().size(), 2u);
    for (const Bucket& b : (*reducer)->buckets()) EXPECT_EQ(b.buffer.device(), cuda);
    (*reducer)->Prepare();
    ASSERT_TRUE(autograd::Backward(net.Loss(CopyToDevice(BatchFor(rank), cuda))).ok());
    ASSERT_TRUE((*reducer)->Finish().ok());
    for (size_t k = 0; k < net.params.size(); ++k) {
      const Tensor g = net.params[k].second.grad();
      EXPECT_EQ(g.device(), cuda) << net.params[k].first;
      ExpectNear(ToVector<float>(g), want[k], 1e-5);
    }
  });
  SetCudaBackendForTesting(nullptr);
}

TEST(ReducerTest, ParametersOnTwoDevicesAreRejectedByName) {
  trainyard::testing::HostBackend backend;
  SetCudaBackendForTesting(&backend);
  RunRanks(1, [&](int, std::shared_ptr<ProcessGroup> group) {
    TinyNet net;
    MoveToDevice(net.params[2].second, Device::Cuda(0));
    auto r = Reducer::Create(net.params, group);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(),
                HasSubstr("fc2.weight is on cuda:0 but fc1.weight on cpu; every parameter must "
                          "be on one device"));
  });
  SetCudaBackendForTesting(nullptr);
}

TEST(ReducerTest, RejectsBadArguments) {
  TinyNet net;
  EXPECT_EQ(Reducer::Create(net.params, nullptr).status().code(), StatusCode::kInvalidArgument);
  RunRanks(1, [&](int, std::shared_ptr<ProcessGroup> group) {
    Tensor frozen = Zeros(Shape{2});
    auto r = Reducer::Create({{"frozen", frozen}}, group);
    EXPECT_THAT(r.status().message(), HasSubstr("frozen"));
    ReducerOptions options;
    options.compression = DType::kInt64;
    EXPECT_THAT(Reducer::Create(net.params, group, options).status().message(), HasSubstr("int64"));
  });
}

}  // namespace
}  // namespace trainyard::dist

#endif  // TY_HAVE_GLOO
