// NcclProcessGroup on real GPUs (binary nccl_gpu_test, built with libtrainyard_nccl.so). A group
// has min(2, GPUs) ranks, threads of this process with one GPU each; on a one-GPU machine the
// group has one rank, which still runs every collective through NCCL. Every test skips itself,
// saying so, where no GPU is visible. Values are small integers, exact in every dtype.
#include "worker/dist/nccl/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <functional>
#include <thread>

#include "kernels/cuda/backend.h"
#include "worker/autograd/engine.h"
#include "worker/dist/nccl_loader.h"
#include "worker/dist/reducer.h"
#include "worker/ops/activation.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/reduction.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/generator.h"

namespace trainyard::dist {
namespace {

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
void RunRanks(int world, const std::function<void(NcclProcessGroup&)>& fn) {
  std::unique_ptr<TcpStoreServer> server;
  auto store = NewStore(&server);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto group = NcclProcessGroup::Create(store, r, world, FastOptions());
      ASSERT_TRUE(group.ok()) << group.status();
      fn(**group);
    });
  }
  for (auto& t : threads) t.join();
}

int World() { return std::min(GpuCount(), 2); }

// Device memory holding a host tensor's bytes; Download() reads it back as `like`'s dtype.
class DeviceCopy {
 public:
  DeviceCopy(int device, const Tensor& host) : bytes_(host.numel() * ElementSize(host.dtype())) {
    cudaSetDevice(device);
    TY_CHECK(cudaMalloc(&data_, bytes_ + 1) == cudaSuccess);
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
        ASSERT_TRUE(WaitFor(g, *work).ok()) << work->name();
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

TEST(NcclProcessGroupTest, LoadsThroughTheLoaderAndRunsACollective) {
  SKIP_WITHOUT_GPU();
  ::setenv(kNcclLibraryEnv, TY_NCCL_LIB, 1);
  std::unique_ptr<TcpStoreServer> server;
  auto group = LoadNcclProcessGroup(NewStore(&server), 0, 1, FastOptions());
  ::unsetenv(kNcclLibraryEnv);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_STREQ((*group)->backend(), "nccl");
  EXPECT_TRUE(WaitFor(**group, *(*group)->Barrier()).ok());
}

// The Reducer over NCCL with the engine's CUDA tensors (libtrainyard_cuda.so): its buckets on
// the GPU, their all-reduces on NCCL's stream after an event on the compute stream. One rank, so
// the average is the rank's own gradient, computed on the CPU for comparison.
TEST(NcclProcessGroupTest, ReducerReducesTheGradientsOfCudaParameters) {
  SKIP_WITHOUT_GPU();
#ifndef TY_CUDA_LIB
  GTEST_SKIP() << "this build has no libtrainyard_cuda.so";
#else
  ::setenv(kernels::cuda::kCudaLibraryEnv, TY_CUDA_LIB, 0);
  ::setenv(kNcclLibraryEnv, TY_NCCL_LIB, 1);
  std::unique_ptr<TcpStoreServer> server;
  auto group = LoadNcclProcessGroup(NewStore(&server), 0, 1, FastOptions());
  ASSERT_TRUE(group.ok()) << group.status();
  Generator gen(11);
  const Tensor x = Randn({6, 5}, {}, &gen);
  std::vector<NamedTensor> cpu = {{"w", Randn({7, 5}, {}, &gen)}, {"b", Randn({7}, {}, &gen)}};
  auto loss = [](const Tensor& input, const std::vector<NamedTensor>& p) {
    Tensor y = ops::Tanh(ops::Linear(input, p[0].second, p[1].second));
    return ops::Mean(ops::Mul(y, y));
  };
  std::vector<NamedTensor> gpu;
  for (NamedTensor& p : cpu) {
    gpu.emplace_back(p.first, CopyToDevice(p.second, Device::Cuda(0)).set_requires_grad(true));
    p.second.set_requires_grad(true);
  }
  ASSERT_TRUE(autograd::Backward(loss(x, cpu)).ok());
  ReducerOptions options;
  options.first_bucket_bytes = 64;  // two buckets: b's, then w's
  auto reducer = Reducer::Create(gpu, std::shared_ptr<ProcessGroup>(std::move(*group)), options);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  ASSERT_EQ((*reducer)->buckets().size(), 2u);
  (*reducer)->Prepare();
  ASSERT_TRUE(autograd::Backward(loss(CopyToDevice(x, Device::Cuda(0)), gpu)).ok());
  ASSERT_TRUE((*reducer)->Finish().ok());
  for (size_t k = 0; k < gpu.size(); ++k) {
    const std::vector<float> got = ToVector<float>(gpu[k].second.grad());
    const std::vector<float> want = ToVector<float>(cpu[k].second.grad());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-3 * (1 + std::abs(want[i]))) << gpu[k].first << " " << i;
    }
  }
#endif
}

}  // namespace
}  // namespace trainyard::dist
