// NcclProcessGroup on real GPUs (binary nccl_gpu_test, built with libtrainyard_nccl.so). A group
// has min(2, GPUs) ranks, threads of this process with one GPU each; on a one-GPU machine the
// group has one rank, which still runs every collective through NCCL. Every test skips itself,
// saying so, where no GPU is visible. Values are small integers, exact in every dtype.
//
// The same file is nccl_emu_test (TY_NCCL_EMU): nccl_process_group.cc, as it is, over the host
// NCCL and CUDA runtime of tests/testing/cuda_emu (nccl_emu.cc, runtime_emu.cc), where a group
// has three ranks, each on an emulated device of its own, and the CUDA tensors are the emulated
// backend's.
#include "worker/dist/nccl/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <future>
#include <set>
#include <thread>

#include "kernels/cuda/backend.h"
#include "tests/testing/dist.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/autograd/engine.h"
#include "worker/dist/fsdp.h"
#include "worker/dist/nccl_loader.h"
#include "worker/dist/reducer.h"
#include "worker/dist/zero.h"
#include "worker/ops/activation.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/reduction.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/generator.h"
#include "worker/tensor/safetensors.h"
#include "worker/trainer/trainer.h"
#ifdef TY_NCCL_EMU
#include "tests/testing/cuda_emu/emu_backend.h"
#endif

namespace trainyard::dist {
namespace {

using ::testing::HasSubstr;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int GpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return cudaGetLastError(), 0;
  return count;
}

#define SKIP_WITHOUT_GPU()                                                           \
  if (GpuCount() == 0) {                                                             \
    GTEST_SKIP() << "no CUDA device visible: NcclProcessGroup needs a GPU per rank"; \
  }

ProcessGroupOptions FastOptions() {
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(5);
  return o;
}

std::shared_ptr<Store> NewStore(std::unique_ptr<TcpStoreServer>* server) {
  auto s = TcpStoreServer::Start();
  TY_CHECK(s.ok()) << s.status();
  *server = std::move(*s);
  auto client = TcpStore::Connect((*server)->address(), std::chrono::seconds(5));
  TY_CHECK(client.ok()) << client.status();
  return *client;
}

// Runs fn(group) on `world` threads, one rank each, over one store.
void RunRankGroups(int world, const std::function<void(std::shared_ptr<NcclProcessGroup>)>& fn,
                   const ProcessGroupOptions& options = FastOptions()) {
  std::unique_ptr<TcpStoreServer> server;
  auto store = NewStore(&server);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto group = NcclProcessGroup::Create(store, r, world, options);
      ASSERT_TRUE(group.ok()) << group.status();
      fn(std::move(*group));
    });
  }
  for (auto& t : threads) t.join();
}

void RunRanks(int world, const std::function<void(NcclProcessGroup&)>& fn,
              const ProcessGroupOptions& options = FastOptions()) {
  RunRankGroups(
      world, [&](std::shared_ptr<NcclProcessGroup> g) { fn(*g); }, options);
}

#ifdef TY_NCCL_EMU
// Every test runs with the emulated backend (the group records its ready events on its compute
// stream); the real libtrainyard_cuda.so, over the real runtime, must not load here.
class EmulatedBackend : public ::testing::Environment {
 public:
  void SetUp() override { SetCudaBackendForTesting(::trainyard::testing::EmulatedCudaBackend()); }
  void TearDown() override { SetCudaBackendForTesting(nullptr); }
};
const auto* const kEmulatedBackend = ::testing::AddGlobalTestEnvironment(new EmulatedBackend);

constexpr int kMaxWorld = 3;
#else
constexpr int kMaxWorld = 2;
#endif
int World() { return std::min(GpuCount(), kMaxWorld); }

// Device memory holding a host tensor's bytes; Download() reads it back as `like`'s dtype.
class DeviceCopy {
 public:
  DeviceCopy(int device, const Tensor& host) : bytes_(host.numel() * ElementSize(host.dtype())) {
    cudaSetDevice(device);
    TY_CHECK(cudaMalloc(&data_, std::max<size_t>(bytes_, 1)) == cudaSuccess);
    TY_CHECK(cudaMemcpy(data_, host.raw_data(), bytes_, cudaMemcpyHostToDevice) == cudaSuccess);
    // A pageable source may return before the transfer lands; the group's stream does not
    // wait for the legacy stream.
    TY_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    buffer_ = DeviceBuffer{data_, host.numel(), host.dtype(), nullptr};
  }
  ~DeviceCopy() { cudaFree(data_); }
  const DeviceBuffer& buffer() const { return buffer_; }
  std::vector<double> Download() const {
    Tensor host = Empty({buffer_.numel}, Options(buffer_.dtype));
    TY_CHECK(cudaMemcpy(host.raw_data(), data_, bytes_, cudaMemcpyDeviceToHost) == cudaSuccess);
    return ToVector<double>(ConvertTo(host, DType::kFloat64, true));
  }

 private:
  size_t bytes_;
  void* data_ = nullptr;
  DeviceBuffer buffer_;
};

Tensor Make(DType dtype, int64_t n, const std::function<double(int64_t)>& f) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = f(i);
  return ConvertTo(FromVector(v), dtype, /*force_copy=*/true);
}

TEST(NcclProcessGroupTest, AllReduceSumsAveragesAndMaxesEveryDtype) {
  SKIP_WITHOUT_GPU();
  const int n = World();
  const int64_t len = 1001;
  RunRanks(n, [&](NcclProcessGroup& g) {
    for (DType dtype :
         {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        DeviceCopy t(g.device(),
                     Make(dtype, len, [&](int64_t i) { return (g.rank() + 1) * (i % 5 + 1); }));
        auto work = g.AllReduce(t.buffer(), op);
        const Status st = WaitFor(g, *work);
        ASSERT_TRUE(st.ok()) << st;
        EXPECT_EQ(work->bytes(), len * static_cast<int64_t>(ElementSize(dtype)));
        const std::vector<double> got = t.Download();
        for (int64_t i = 0; i < len; ++i) {
          const double k = i % 5 + 1, sum = k * n * (n + 1) / 2;
          double want = op == ReduceOp::kMax ? k * n : sum;
          if (op == ReduceOp::kAverage) {
            want = dtype == DType::kInt64 ? static_cast<int64_t>(sum) / n : sum / n;
          }
          ASSERT_EQ(got[i], want) << work->name() << " at " << i;
        }
      }
    }
  });
}

TEST(NcclProcessGroupTest, BroadcastCopiesTheRootsTensorToEveryRank) {
  SKIP_WITHOUT_GPU();
  const int n = World();
  RunRanks(n, [&](NcclProcessGroup& g) {
    DeviceCopy t(g.device(),
                 Make(DType::kFloat32, 333, [&](int64_t i) { return g.rank() * 100 + i % 7; }));
    auto work = g.Broadcast(t.buffer(), n - 1);
    ASSERT_TRUE(WaitFor(g, *work).ok()) << work->name();
    const std::vector<double> got = t.Download();
    for (int64_t i = 0; i < 333; ++i) ASSERT_EQ(got[i], (n - 1) * 100 + i % 7) << i;
  });
}

TEST(NcclProcessGroupTest, AllGatherConcatenatesInRankOrder) {
  SKIP_WITHOUT_GPU();
  const int n = World();
  RunRanks(n, [&](NcclProcessGroup& g) {
    DeviceCopy in(g.device(),
                  Make(DType::kBFloat16, 17, [&](int64_t i) { return g.rank() * 20 + i; }));
    DeviceCopy out(g.device(), Make(DType::kBFloat16, 17 * n, [](int64_t) { return -1; }));
    auto work = g.AllGather(out.buffer(), in.buffer());
    ASSERT_TRUE(WaitFor(g, *work).ok()) << work->name();
    const std::vector<double> got = out.Download();
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < 17; ++i) ASSERT_EQ(got[r * 17 + i], r * 20 + i);
    }
  });
}

TEST(NcclProcessGroupTest, ReduceScatterLeavesEachRankItsReducedChunk) {
  SKIP_WITHOUT_GPU();
  const int n = World();
  RunRanks(n, [&](NcclProcessGroup& g) {
    DeviceCopy in(g.device(),
                  Make(DType::kFloat64, 9 * n, [&](int64_t j) { return (g.rank() + 1) * j; }));
    DeviceCopy out(g.device(), Make(DType::kFloat64, 9, [](int64_t) { return -1; }));
    auto work = g.ReduceScatter(out.buffer(), in.buffer());
    ASSERT_TRUE(WaitFor(g, *work).ok()) << work->name();
    const std::vector<double> got = out.Download();
    for (int64_t i = 0; i < 9; ++i) {
      ASSERT_EQ(got[i], (g.rank() * 9 + i) * n * (n + 1) / 2) << i;
    }
  });
}

TEST(NcclProcessGroupTest, NamesOpsBySequenceNumberAndBarrierCompletes) {
  SKIP_WITHOUT_GPU();
  RunRanks(World(), [&](NcclProcessGroup& g) {
    auto first = g.Barrier();
    auto second = g.Barrier();
    EXPECT_EQ(first->name(), "barrier #1");
    EXPECT_EQ(second->name(), "barrier #2");
    ASSERT_TRUE(WaitFor(g, *second).ok());
    ASSERT_TRUE(first->IsCompleted());  // in order
    EXPECT_LE(first->start_time(), first->end_time());
    const std::vector<CollectiveRecord> last = g.flight_recorder().Last(16);
    ASSERT_EQ(last.size(), 2u);
    EXPECT_EQ(last[1].seq, 2);
    EXPECT_EQ(last[1].op, "barrier");
    EXPECT_EQ(last[1].state, CollectiveState::kDone);
  });
}

TEST(NcclProcessGroupTest, RejectsCpuTensorsAndBadBuffersNamingTheCollective) {
  SKIP_WITHOUT_GPU();
  RunRanks(1, [&](NcclProcessGroup& g) {
    Status cpu = g.AllReduce(Full({4}, 1.0))->Wait(milliseconds(0));
    EXPECT_EQ(cpu.code(), StatusCode::kInvalidArgument) << cpu;
    EXPECT_NE(cpu.message().find("all_reduce"), std::string::npos) << cpu;
    EXPECT_NE(cpu.message().find("cpu"), std::string::npos) << cpu;
    DeviceCopy ints(g.device(), Make(DType::kInt32, 4, [](int64_t) { return 1; }));
    Status dtype = g.AllReduce(ints.buffer())->Wait(milliseconds(0));
    EXPECT_EQ(dtype.code(), StatusCode::kInvalidArgument) << dtype;
    EXPECT_NE(dtype.message().find("int32"), std::string::npos) << dtype;
    Status root = g.Broadcast(ints.buffer(), 3)->Wait(milliseconds(0));
    EXPECT_EQ(root.code(), StatusCode::kInvalidArgument) << root;
    // The group still works.
    EXPECT_TRUE(WaitFor(g, *g.Barrier()).ok());
  });
}

TEST(NcclProcessGroupTest, ARankThatNeverJoinsIsNamedWithinTheTimeout) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<TcpStoreServer> server;
  auto store = NewStore(&server);
  ProcessGroupOptions o;
  o.timeout = milliseconds(500);
  const auto t0 = Clock::now();
  auto group = NcclProcessGroup::Create(store, 0, 2, o);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  ASSERT_EQ(group.status().code(), StatusCode::kDeadlineExceeded) << group.status();
  EXPECT_NE(group.status().message().find("rank 1 never joined"), std::string::npos)
      << group.status();
}

// Rank 1 joins the store but never creates its communicator: rank 0's start-up is bounded.
TEST(NcclProcessGroupTest, ACommunicatorThatNeverCompletesIsAbortedAtTheTimeout) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<TcpStoreServer> server;
  auto store = NewStore(&server);
  ASSERT_TRUE(store->Set("nccl/joined/1", "1").ok());
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(2);
  const auto t0 = Clock::now();
  auto group = NcclProcessGroup::Create(store, 0, 2, o);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(15));
  ASSERT_EQ(group.status().code(), StatusCode::kDeadlineExceeded) << group.status();
  EXPECT_NE(group.status().message().find("creating the communicator"), std::string::npos)
      << group.status();
}

// Ops queued faster than they run: each completes, in order, with its own result.
TEST(NcclProcessGroupTest, ManyCollectivesInFlightCompleteInOrder) {
  SKIP_WITHOUT_GPU();
  const int n = World();
  RunRanks(n, [&](NcclProcessGroup& g) {
    std::vector<std::unique_ptr<DeviceCopy>> buffers;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 24; ++k) {
      buffers.push_back(std::make_unique<DeviceCopy>(
          g.device(), Make(DType::kFloat32, 64 + k, [&](int64_t i) { return k + g.rank() + i; })));
      works.push_back(g.AllReduce(buffers.back()->buffer()));
    }
    ASSERT_TRUE(WaitFor(g, *works.back()).ok()) << works.back()->name();
    for (int k = 0; k < 24; ++k) {
      ASSERT_TRUE(works[k]->IsCompleted()) << works[k]->name();
      EXPECT_EQ(works[k]->name(), "all_reduce #" + std::to_string(k + 1) + " (" +
                                      std::to_string(64 + k) + " float32)");
      const std::vector<double> got = buffers[k]->Download();
      for (int64_t i = 0; i < 64 + k; ++i) {
        ASSERT_EQ(got[i], n * (k + i) + n * (n - 1) / 2) << works[k]->name() << " at " << i;
      }
    }
  });
}

// Rank 0's all-reduce that no peer issues: named within the timeout, and the group is broken
// (ops behind it and later ones are Aborted) without a hang. The peers keep their groups until
// rank 0 has seen it all.
TEST(NcclProcessGroupTest, ACollectiveNoPeerIssuesTimesOutAndBreaksTheGroup) {
  SKIP_WITHOUT_GPU();
  if (World() < 2) GTEST_SKIP() << "needs two ranks: one GPU is visible";
  ProcessGroupOptions o;
  o.timeout = milliseconds(1000);
  std::promise<void> rank0_done;
  const std::shared_future<void> rank0_seen = rank0_done.get_future().share();
  RunRanks(
      World(),
      [&](NcclProcessGroup& g) {
        if (g.rank() != 0) {
          EXPECT_EQ(rank0_seen.wait_for(std::chrono::seconds(60)), std::future_status::ready);
          return;
        }
        DeviceCopy t(g.device(), Make(DType::kFloat32, 8, [](int64_t i) { return i; }));
        const auto t0 = Clock::now();
        auto first = g.AllReduce(t.buffer());
        auto second = g.AllReduce(t.buffer());
        const Status hung = first->Wait(std::chrono::seconds(30));
        EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
        EXPECT_EQ(hung.code(), StatusCode::kDeadlineExceeded) << hung;
        EXPECT_THAT(hung.message(), HasSubstr("all_reduce #1 (8 float32): timed out after 1s"));
        const Status behind = second->Wait(std::chrono::seconds(5));
        EXPECT_EQ(behind.code(), StatusCode::kAborted) << behind;
        EXPECT_THAT(behind.message(), HasSubstr("all_reduce #2"));
        const Status later = g.Barrier()->Wait(std::chrono::seconds(5));
        EXPECT_EQ(later.code(), StatusCode::kAborted) << later;
        EXPECT_THAT(later.message(), HasSubstr("broken"));
        const std::vector<CollectiveRecord> last = g.flight_recorder().Last(16);
        ASSERT_EQ(last.size(), 3u);
        EXPECT_EQ(last[0].op, "all_reduce");
        EXPECT_EQ(last[0].size.numel, 8);
        EXPECT_EQ(last[0].size.dtype, "float32");
        for (const CollectiveRecord& r : last)
          EXPECT_EQ(r.state, CollectiveState::kFailed) << r.seq;
        rank0_done.set_value();
      },
      o);
}

// A peer that leaves (destroys its group) while rank 0 waits for it in an all-reduce: rank 0's
// op fails within the timeout, naming itself, whether NCCL reports the peer gone (Unavailable)
// or waits (DeadlineExceeded).
TEST(NcclProcessGroupTest, APeerThatLeavesFailsTheCollectiveWaitingForIt) {
  SKIP_WITHOUT_GPU();
  if (World() < 2) GTEST_SKIP() << "needs two ranks: one GPU is visible";
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(2);
  RunRanks(
      World(),
      [&](NcclProcessGroup& g) {
        if (g.rank() != 0) return;  // its group is destroyed on return
        DeviceCopy t(g.device(), Make(DType::kFloat32, 8, [](int64_t i) { return i; }));
        const auto t0 = Clock::now();
        const Status st = g.AllReduce(t.buffer())->Wait(std::chrono::seconds(30));
        EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
        EXPECT_TRUE(st.code() == StatusCode::kUnavailable ||
                    st.code() == StatusCode::kDeadlineExceeded)
            << st;
        EXPECT_THAT(st.message(), HasSubstr("all_reduce #1"));
#ifdef TY_NCCL_EMU
        EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
        EXPECT_THAT(st.message(), HasSubstr("remote process exited"));
#endif
      },
      o);
}

#ifdef TY_NCCL_EMU
// NCCL's asynchronous error (here ncclInvalidUsage, which the host NCCL reports for collectives
// that differ between ranks) fails the op in flight as InvalidArgument with the hint, and breaks
// the group.
TEST(NcclProcessGroupTest, AnAsynchronousNcclErrorFailsTheOpAndBreaksTheGroup) {
  RunRanks(World(), [&](NcclProcessGroup& g) {
    DeviceCopy t(g.device(), Make(DType::kFloat32, 10 + g.rank(), [](int64_t i) { return i; }));
    const Status st = g.AllReduce(t.buffer())->Wait(std::chrono::seconds(30));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(st.message(), HasSubstr("all_reduce #1"));
    EXPECT_THAT(st.message(), HasSubstr("collective #1 differs between ranks"));
    EXPECT_THAT(st.message(), HasSubstr("do all ranks issue the same collectives"));
    EXPECT_EQ(g.Barrier()->Wait(std::chrono::seconds(5)).code(), StatusCode::kAborted);
  });
}
#endif

TEST(NcclProcessGroupTest, LoadsThroughTheLoaderAndRunsACollective) {
  SKIP_WITHOUT_GPU();
#ifndef TY_NCCL_LIB
  GTEST_SKIP() << "this build has no libtrainyard_nccl.so (the host NCCL is linked in)";
#else
  ::setenv(kNcclLibraryEnv, TY_NCCL_LIB, 1);
  std::unique_ptr<TcpStoreServer> server;
  auto group = LoadNcclProcessGroup(NewStore(&server), 0, 1, FastOptions());
  ::unsetenv(kNcclLibraryEnv);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_STREQ((*group)->backend(), "nccl");
  EXPECT_TRUE(WaitFor(**group, *(*group)->Barrier()).ok());
#endif
}

// This rank's chunk of each bucket's padded buffer holds the average `want` there; ZeRO-2
// dropped the buffers and the gradients.
void ExpectShardsOfTheAverage(const Reducer& reducer, const std::vector<NamedTensor>& params,
                              const std::vector<std::vector<float>>& want, int rank, double tol) {
  const bool released = reducer.options().release_buckets;
  for (const Bucket& bucket : reducer.buckets()) {
    EXPECT_EQ(bucket.buffer.defined(), !released);
    for (size_t k : bucket.params) EXPECT_EQ(params[k].second.grad().defined(), !released);
    std::vector<float> flat(bucket.padded, 0.0f);
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      const std::vector<float>& p = want[bucket.params[j]];
      std::copy(p.begin(), p.end(), flat.begin() + bucket.offsets[j]);
    }
    const std::vector<float> shard = ToVector<float>(bucket.shard);
    ASSERT_EQ(shard.size() * reducer.group().size(), flat.size());
    for (size_t i = 0; i < shard.size(); ++i) {
      const float w = flat[rank * shard.size() + i];
      EXPECT_NEAR(shard[i], w, tol * (1 + std::abs(w))) << "rank " << rank << " shard " << i;
    }
  }
}

// The cases that run the engine's kernels: its CUDA backend (libtrainyard_cuda.so, or the
// emulated one); the trainer's cases also need two ranks.
#if defined(TY_CUDA_LIB)
#define TY_USE_CUDA_LIBRARY() ::setenv(kernels::cuda::kCudaLibraryEnv, TY_CUDA_LIB, 0)
#elif !defined(TY_NCCL_EMU)
#define TY_USE_CUDA_LIBRARY() GTEST_SKIP() << "this build has no libtrainyard_cuda.so"
#else
#define TY_USE_CUDA_LIBRARY() (void)0
#endif
#define SKIP_WITHOUT_TWO_TRAINER_DEVICES()                                \
  SKIP_WITHOUT_GPU();                                                     \
  if (World() < 2) GTEST_SKIP() << "needs two ranks: one GPU is visible"; \
  TY_USE_CUDA_LIBRARY()

// The Reducer over NCCL with the engine's CUDA tensors: its buckets on the device, their
// collectives on NCCL's stream after an event on the compute stream. Each rank's input differs;
// every rank ends with the average of the ranks' gradients, computed on the CPU for comparison:
// all-reduced, all-reduced in bfloat16 (compression), reduce-scattered (shard_gradients), and
// reduce-scattered releasing each bucket (ZeRO-2).
TEST(NcclProcessGroupTest, ReducerAveragesTheGradientsOfCudaParameters) {
  SKIP_WITHOUT_GPU();
  TY_USE_CUDA_LIBRARY();
  const int n = World();
  auto loss = [](const Tensor& input, const std::vector<NamedTensor>& p) {
    Tensor y = ops::Tanh(ops::Linear(input, p[0].second, p[1].second));
    return ops::Mean(ops::Mul(y, y));
  };
  auto input = [](int rank) {
    Generator gen(100 + rank);
    return Randn({6, 5}, {}, &gen);
  };
  Generator gen(11);
  const Tensor w = Randn({7, 5}, {}, &gen), b = Randn({7}, {}, &gen);
  // The CPU reference: the mean over ranks of each rank's gradients.
  std::vector<std::vector<float>> want(2);
  for (int r = 0; r < n; ++r) {
    std::vector<NamedTensor> cpu = {
        {"w", ConvertTo(w, DType::kFloat32, true).set_requires_grad(true)},
        {"b", ConvertTo(b, DType::kFloat32, true).set_requires_grad(true)}};
    ASSERT_TRUE(autograd::Backward(loss(input(r), cpu)).ok());
    for (size_t k = 0; k < 2; ++k) {
      const std::vector<float> grad = ToVector<float>(cpu[k].second.grad());
      want[k].resize(grad.size());
      for (size_t i = 0; i < grad.size(); ++i) want[k][i] += grad[i] / n;
    }
  }
  for (const char* variant : {"all_reduce", "bfloat16", "shard_gradients", "release_buckets"}) {
    SCOPED_TRACE(variant);
    const std::string v = variant;
    const double tol = v == "bfloat16" ? 1e-2 : 2e-3;
    RunRankGroups(n, [&](std::shared_ptr<NcclProcessGroup> g) {
      const Device device = Device::Cuda(g->device());
      std::vector<NamedTensor> params = {{"w", CopyToDevice(w, device).set_requires_grad(true)},
                                         {"b", CopyToDevice(b, device).set_requires_grad(true)}};
      ReducerOptions options;
      options.first_bucket_bytes = 64;  // two buckets: b's, then w's
      if (v == "bfloat16") options.compression = DType::kBFloat16;
      options.shard_gradients = v == "shard_gradients" || v == "release_buckets";
      options.release_buckets = v == "release_buckets";  // ZeRO-2
      auto reducer = Reducer::Create(params, g, options);
      ASSERT_TRUE(reducer.ok()) << reducer.status();
      ASSERT_EQ((*reducer)->buckets().size(), 2u);
      (*reducer)->Prepare();
      ASSERT_TRUE(autograd::Backward(loss(CopyToDevice(input(g->rank()), device), params)).ok());
      ASSERT_TRUE((*reducer)->Finish().ok());
      auto expect_near = [&](float got, float want, const std::string& where) {
        EXPECT_NEAR(got, want, tol * (1 + std::abs(want))) << "rank " << g->rank() << " " << where;
      };
      if (!options.shard_gradients) {
        for (size_t k = 0; k < params.size(); ++k) {
          const std::vector<float> got = ToVector<float>(params[k].second.grad());
          ASSERT_EQ(got.size(), want[k].size());
          for (size_t i = 0; i < got.size(); ++i) {
            expect_near(got[i], want[k][i], params[k].first + " " + std::to_string(i));
          }
        }
        return;
      }
      ExpectShardsOfTheAverage(**reducer, params, want, g->rank(), tol);
    });
  }
}

// ZeRO-3 on the device: two layers as two units (the root the second), each rank's input its
// own; three SGD steps through ShardedUnits, the reducer and ZeroOptimizer over NCCL end with
// the weights of one CPU process stepping on the mean of the ranks' losses. Needs no Gloo.
TEST(NcclProcessGroupTest, ShardedUnitsTrainOnTheDeviceAsOneCpuProcess) {
  SKIP_WITHOUT_GPU();
  TY_USE_CUDA_LIBRARY();
  const int n = World();
  auto make = [](const Device& device) {
    Generator gen(21);
    std::vector<NamedTensor> p;
    for (const char* name : {"w1", "b1", "w2", "b2"}) {
      const Shape shape = name[0] == 'w' ? Shape{5, 5} : Shape{5};
      p.emplace_back(name, CopyToDevice(Randn(shape, {}, &gen), device).set_requires_grad(true));
    }
    return p;
  };
  auto loss = [](const std::vector<NamedTensor>& p, const Tensor& h) {
    Tensor y = ops::Tanh(ops::Linear(h, p[2].second, p[3].second));
    return ops::Mean(ops::Mul(y, y));
  };
  auto layer1 = [](const std::vector<NamedTensor>& p, const Tensor& x) {
    return ops::Tanh(ops::Linear(x, p[0].second, p[1].second));
  };
  auto input = [](int rank, int step, const Device& device) {
    Generator gen(300 + 10 * step + rank);
    return CopyToDevice(Randn({3, 5}, {}, &gen), device);
  };
  auto sgd = [](std::vector<optim::NamedTensor> p) -> StatusOr<std::unique_ptr<optim::Optimizer>> {
    ASSIGN_OR_RETURN(auto opt, optim::SGD::Create(std::move(p), {0.1, 0.9}));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  };
  std::vector<NamedTensor> want = make(Device::Cpu());
  auto opt = sgd(want);
  ASSERT_TRUE(opt.ok());
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < n; ++r) {
      Tensor l = loss(want, layer1(want, input(r, step, Device::Cpu())));
      ASSERT_TRUE(autograd::Backward(ops::MulScalar(l, 1.0 / n)).ok());
    }
    (*opt)->Step();
    (*opt)->ZeroGrad();
  }
  const std::vector<std::vector<size_t>> units = {{2, 3}, {0, 1}};
  RunRankGroups(n, [&](std::shared_ptr<NcclProcessGroup> g) {
    const Device device = Device::Cuda(g->device());
    std::vector<NamedTensor> params = make(device);
    auto sharded = ShardedUnits::Create(params, units, g);
    ASSERT_TRUE(sharded.ok()) << sharded.status();
    ShardedUnits* u = sharded->get();
    ReducerOptions options;
    options.shard_gradients = options.release_buckets = true;
    options.plan = {units[1], units[0]};
    options.on_launch = [u](size_t bucket) { u->Release(1 - bucket); };
    auto reducer = Reducer::Create(params, g, options);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    auto zero = ZeroOptimizer::Create(reducer->get(), sgd, {u->shard(1), u->shard(0)});
    ASSERT_TRUE(zero.ok()) << zero.status();
    for (int step = 0; step < 3; ++step) {
      (*reducer)->Prepare();
      Tensor l = u->RunUnit(0, input(g->rank(), step, device), [&](const Tensor& x) {
        Tensor h = u->RunUnit(1, x, [&](const Tensor& t) { return layer1(params, t); });
        return loss(params, h);
      });
      ASSERT_TRUE(autograd::Backward(l).ok());
      ASSERT_TRUE((*reducer)->Finish().ok());
      ASSERT_TRUE(u->TakeError().ok());
      ASSERT_TRUE((*zero)->Step().ok());
    }
    ASSERT_TRUE(u->Unshard().ok());
    for (size_t k = 0; k < params.size(); ++k) {
      const std::vector<float> got = ToVector<float>(CopyToDevice(params[k].second, Device::Cpu()));
      const std::vector<float> ref = ToVector<float>(want[k].second);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], ref[i], 1e-4 * (1 + std::abs(ref[i])))
            << "rank " << g->rank() << " " << want[k].first << "[" << i << "]";
      }
    }
  });
}

#ifdef TY_HAVE_GLOO  // the CPU reference runs over Gloo, which the lent GPU machines lack
// The trainer's data parallelism on the device: World() ranks of a tiny GPT (dropout, clipping,
// AdamW), their gradients averaged through NCCL, report the losses that the same job reports
// on the CPU through Gloo, and end with equal weights; also with ZeRO-2 and ZeRO-3.
// With `zero_stage` (0: plain data parallelism; 2 and 3 shard gradients and weights).
void ExpectDeviceTrainingMatchesTheCpu(int zero_stage) {
  SCOPED_TRACE("zero_stage " + std::to_string(zero_stage));
  const int n = World();
  ::trainyard::testing::TempDir dir;
  const std::string text = dir.path() + "/corpus.txt";
  trainer::testing::WriteGptCorpus(text);
  const std::string world = R"(, "parallelism": {"world_size": )" + std::to_string(n) +
                            R"(, "zero_stage": )" + std::to_string(zero_stage) + "}";
  auto train = [&](int rank, std::shared_ptr<ProcessGroup> group, const std::string& extra,
                   std::vector<double>* losses, std::vector<float>* weights) {
    trainer::TrainerOptions options;
    options.process_group = std::move(group);
    options.on_step = [&](const trainer::StepMetrics& m) { losses->push_back(m.loss); };
    auto t =
        trainer::Trainer::Create(trainer::testing::DeviceGptSpec(text, world + extra, 4), options);
    ASSERT_TRUE(t.ok()) << "rank " << rank << ": " << t.status();
    StatusOr<trainer::TrainSummary> result = (*t)->Run();
    ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
    *weights = ToVector<float>((*t)->model().NamedParameters().front().second);
  };
  std::vector<std::vector<double>> cpu_losses(n), losses(n);
  std::vector<std::vector<float>> cpu_weights(n), weights(n);
  ::trainyard::testing::RunRanks(n, [&](int rank, std::shared_ptr<ProcessGroup> gloo) {
    train(rank, gloo, "", &cpu_losses[rank], &cpu_weights[rank]);
  });
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);  // a rank may lag its peers by a step on a loaded machine
  RunRankGroups(
      n,
      [&](std::shared_ptr<NcclProcessGroup> g) {
        train(g->rank(), g, R"(, "device": "cuda")", &losses[g->rank()], &weights[g->rank()]);
      },
      o);
  ASSERT_EQ(losses[0].size(), 4u);
  ASSERT_EQ(cpu_losses[0].size(), 4u);
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(losses[r], losses[0]) << "rank " << r;
    EXPECT_EQ(weights[r], weights[0]) << "rank " << r;
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(losses[0][i], cpu_losses[0][i], 1e-4 * cpu_losses[0][i]) << "step " << i + 1;
  }
  ASSERT_EQ(weights[0].size(), cpu_weights[0].size());
  for (size_t i = 0; i < weights[0].size(); ++i) {
    ASSERT_NEAR(weights[0][i], cpu_weights[0][i], 1e-3) << i;
  }
}

TEST(NcclProcessGroupTest, TheTrainerTrainsDataParallelOnTheDeviceAsOnTheCpu) {
  SKIP_WITHOUT_TWO_TRAINER_DEVICES();
  for (int zero_stage : {0, 2, 3}) ExpectDeviceTrainingMatchesTheCpu(zero_stage);
}

// Pipeline stages on the device: two ranks, each a stage of a two-block GPT, send activations
// and gradients over an NCCL pair (ProcessGroup::Send and Recv), sum the tied embedding's
// gradient over it, agree on the loss and gather the weights and optimizer state into rank
// 0's checkpoint over the world group, and report the losses one CPU process reports.
TEST(NcclProcessGroupTest, TheTrainerTrainsPipelineStagesOnTheDeviceAsOneCpuProcess) {
  SKIP_WITHOUT_TWO_TRAINER_DEVICES();
  ::trainyard::testing::TempDir dir;
  const std::string text = dir.path() + "/corpus.txt";
  trainer::testing::WriteGptCorpus(text);
  auto spec = [&](const std::string& extra) {
    return trainer::testing::ParseSpec(
        R"({"model": {"gpt": {"context": 16, "n_layer": 2, "n_head": 2, "n_embd": 16,
            "dropout": 0}}, "data": {"text": {"path": ")" +
        text + R"("}}, "optimizer": {"adamw": {"lr": 0.01}}, "grad_clip_norm": 0.5,
            "batch_size": 4, "steps": 4, "seed": 3, "eval": {"max_batches": 2})" +
        extra + "}");
  };
  std::vector<double> want;
  for (const trainer::StepMetrics& m :
       trainer::testing::TrainToEnd(spec(R"(, "parallelism": {"grad_accumulation_steps": 3})"))) {
    want.push_back(m.loss);
  }
  std::unique_ptr<TcpStoreServer> server;
  auto store = NewStore(&server);
  std::vector<std::vector<double>> losses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ProcessGroupOptions o;
      o.timeout = std::chrono::seconds(60);
      auto world =
          NcclProcessGroup::Create(std::make_shared<PrefixStore>("world/", store), r, 2, o);
      ASSERT_TRUE(world.ok()) << world.status();
      auto pair = NcclProcessGroup::Create(std::make_shared<PrefixStore>("pair/", store), r, 2, o);
      ASSERT_TRUE(pair.ok()) << pair.status();
      trainer::TrainerOptions options;
      options.process_group = std::move(*world);
      options.pipeline.stage = r;
      options.pipeline.stages = 2;
      (r == 0 ? options.pipeline.next : options.pipeline.prev) = std::move(*pair);
      options.pipeline.tied = r == 0 ? options.pipeline.next : options.pipeline.prev;
      options.on_step = [&](const trainer::StepMetrics& m) { losses[r].push_back(m.loss); };
      auto t = trainer::Trainer::Create(
          spec(R"(, "device": "cuda", "checkpoint": {"dir": ")" + dir.path() +
               R"(/run"}, "parallelism": {"world_size": 2, "pipeline_stages": 2,
                   "grad_accumulation_steps": 3})"),
          options);
      ASSERT_TRUE(t.ok()) << "rank " << r << ": " << t.status();
      StatusOr<trainer::TrainSummary> result = (*t)->Run();
      ASSERT_TRUE(result.ok()) << "rank " << r << ": " << result.status();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(losses[1], losses[0]);
  ASSERT_EQ(losses[0].size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(losses[0][i], want[i], 1e-4 * want[i]) << i + 1;
  // Rank 0's checkpoint holds both stages' optimizer state (AdamW's moments of every block).
  auto state = LoadSafetensors(dir.path() + "/run/step-00000004/optimizer.safetensors");
  ASSERT_TRUE(state.ok()) << state.status();
  std::set<std::string> keys;
  for (const auto& [key, t] : state->tensors) keys.insert(key);
  for (const char* key :
       {"transformer.h.0.attn.c_attn.weight.exp_avg", "transformer.h.1.attn.c_attn.weight.exp_avg",
        "transformer.ln_f.weight.exp_avg_sq", "transformer.wte.weight.step"}) {
    EXPECT_EQ(keys.count(key), 1u) << key;
  }
}

#endif  // TY_HAVE_GLOO

}  // namespace
}  // namespace trainyard::dist
