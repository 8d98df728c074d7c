// The hierarchical all-reduce (Note [Hierarchical all-reduce], worker/dist/gloo_hierarchical.cc)
// on two namespaced nodes of two rank processes each, beside the flat TCP ring on the same
// nodes: the same sums, the same bits on every rank, and both timed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/netns.h"
#include "tests/testing/subprocess.h"
#include "worker/dist/gloo_process_group.h"
#include "worker/dist/process_group.h"
#include "worker/dist/store.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/generator.h"

namespace trainyard::dist {
namespace {

constexpr const char* kRankEnv = "TY_HIERARCHICAL_TEST_RANK";
constexpr int kTimedMb = 32;

// FNV-1a over the bits of a float tensor: ranks print it, the test compares.
uint64_t Fingerprint(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < t.numel() * 4; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// A rank: $TY_HIERARCHICAL_TEST_RANK is "<store> <rank> <size> <data address> <algorithm>".
// Prints "transport <t>", "sums ok", "fingerprint <n>" and "ms <median>"; exits 1 on a failure.
int RunRank(const char* spec) {
  std::istringstream in(spec);
  std::string address, host, algorithm;
  int rank = 0, size = 0;
  in >> address >> rank >> size >> host >> algorithm;
  auto fail = [](const Status& st) {
    return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  };
  auto store = TcpStore::Connect(address, std::chrono::seconds(20));
  if (!store.ok()) return fail(store.status());
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(20);
  options.hostname = host;
  options.algorithm = algorithm;
  options.shm_tag = "hierarchical-test";
  auto made = CreateProcessGroup("gloo", *store, rank, size, options);
  if (!made.ok()) return fail(made.status());
  ProcessGroup& g = **made;
  std::printf("transport %s\n", static_cast<GlooProcessGroup&>(g).transport().c_str());
  // Exact sums: rank r contributes (r + 1) * ((i % 7) - 3) / 4, so the sum is 10 times that.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{262147}, int64_t{3} << 20}) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = (rank + 1) * static_cast<float>(i % 7 - 3) / 4;
    Tensor t = FromVector(v);
    Status st = WaitFor(g, *g.AllReduce(t));
    if (!st.ok()) return fail(st);
    const float* got = t.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (got[i] != 10 * static_cast<float>(i % 7 - 3) / 4) {
        std::fprintf(stderr, "n=%lld: element %lld is %g\n", static_cast<long long>(n),
                     static_cast<long long>(i), got[i]);
        return 1;
      }
    }
  }
  std::printf("sums ok\n");
  // Inexact sums: every rank must still hold the same bits.
  Generator gen(static_cast<uint64_t>(rank) + 1);
  Tensor noisy = Randn({(1 << 20) + 77}, {}, &gen);
  Status st = WaitFor(g, *g.AllReduce(noisy));
  if (!st.ok()) return fail(st);
  std::printf("fingerprint %llu\n", static_cast<unsigned long long>(Fingerprint(noisy)));
  Tensor big = Full({int64_t{kTimedMb} << 18}, 1.0);
  std::vector<double> ms;
  for (int i = 0; i < 4; ++i) {
    st = WaitFor(g, *g.Barrier());
    const auto t0 = std::chrono::steady_clock::now();
    if (st.ok()) st = WaitFor(g, *g.AllReduce(big));
    if (!st.ok()) return fail(st);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin() + 1, ms.end());  // the first is a warm-up
  std::printf("ms %.2f\n", ms[2]);
  return 0;
}

[[maybe_unused]] const bool kRanAsRank = [] {
  const char* spec = std::getenv(kRankEnv);
  if (spec != nullptr) {
    const int code = RunRank(spec);
    std::fflush(stdout);
    ::_exit(code);
  }
  return false;
}();

std::string Self() {
  char path[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : "";
}

// The lines of each rank's output, for 2 nodes x 2 ranks running `algorithm`.
std::vector<std::string> RunFourRanks(const testing::NetLab& lab, const std::string& algorithm) {
  auto server = TcpStoreServer::Start(lab.ControlBridgeAddress(), 0);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return {};
  std::vector<std::unique_ptr<testing::Subprocess>> ranks;
  for (int r = 0; r < 4; ++r) {
    const int node = 1 + r / 2;
    const std::string spec = (*server)->address() + " " + std::to_string(r) + " 4 " +
                             lab.Address(node, testing::Net::kData) + " " + algorithm;
    ::setenv(kRankEnv, spec.c_str(), 1);
    ranks.push_back(std::make_unique<testing::Subprocess>(
        std::vector<std::string>{"/usr/sbin/ip", "netns", "exec", lab.Namespace(node), Self()}));
    ::unsetenv(kRankEnv);
  }
  std::vector<std::string> outs;
  for (int r = 0; r < 4; ++r) {
    testing::ProcessResult result = ranks[r]->Wait(std::chrono::seconds(120));
    EXPECT_EQ(result.exit_code, 0) << "rank " << r << ": " << result.err;
    outs.push_back(result.out);
  }
  return outs;
}

// The rest of the line of `out` that starts with "<name> ".
std::string Field(const std::string& out, const std::string& name) {
  const std::string text = "\n" + out, key = "\n" + name + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  return text.substr(start, text.find('\n', start) - start);
}

TEST(HierarchicalAllReduceTest, TwoNodesOfTwoRanksSumLikeTheFlatRingWithTheSameBitsEverywhere) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  testing::NetLab lab;
  std::string error;
  ASSERT_TRUE(lab.Create(3, &error)) << error;  // node 0 is unused: it has no data link
  // Then with each node's data link capped, where the hierarchy's lighter load on the link
  // between nodes shows: the flat ring carries 1.5 times the tensor each way across it, the
  // hierarchy once.
  for (const std::string cap : {"", "1gbit"}) {
    for (int node : {1, 2}) {
      if (cap.empty()) continue;
      ASSERT_TRUE(lab.Cap(node, testing::Net::kData, cap, &error)) << error;
    }
    double ms[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const std::string algorithm = k == 0 ? "auto" : "ring";
      SCOPED_TRACE(algorithm + (cap.empty() ? "" : ", links capped at " + cap));
      const std::vector<std::string> outs = RunFourRanks(lab, algorithm);
      ASSERT_EQ(outs.size(), 4u);
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(Field(outs[r], "transport"), k == 0 ? "shm+tcp" : "tcp") << outs[r];
        EXPECT_NE(outs[r].find("sums ok"), std::string::npos) << outs[r];
        EXPECT_EQ(Field(outs[r], "fingerprint"), Field(outs[0], "fingerprint")) << "rank " << r;
      }
      ms[k] = std::atof(Field(outs[0], "ms").c_str());
    }
    std::printf(
        "all-reduce of %d MB, 2 nodes x 2 ranks, links %s: hierarchical %.1f ms, flat "
        "ring %.1f ms\n",
        kTimedMb, cap.empty() ? "uncapped" : ("capped at " + cap).c_str(), ms[0], ms[1]);
  }
}

}  // namespace
}  // namespace trainyard::dist
