// The gloo backend's shared-memory transport (worker/dist/shm_comm.h) where it differs from
// TCP: where ranks count as one host, the segment's life, the fallback to TCP, and the bits of
// the result. The collectives themselves run in process_group_test.cc (GlooTest, .../Shm).
#ifdef TY_HAVE_GLOO
#include "worker/dist/shm_comm.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "common/random_id.h"
#include "worker/dist/gloo_process_group.h"
#include "worker/dist/process_group.h"
#include "worker/dist/store.h"
#include "worker/tensor/factories.h"

namespace trainyard::dist {
namespace {

// Creates rank r of n on its own thread (over `store`) and runs body(group) on each.
void RunRanks(int n, const ProcessGroupOptions& options,
              const std::function<void(GlooProcessGroup&)>& body) {
  auto server = TcpStoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto store = TcpStore::Connect((*server)->address(), std::chrono::seconds(5));
      ASSERT_TRUE(store.ok()) << store.status();
      auto group = CreateProcessGroup("gloo", *store, r, n, options);
      ASSERT_TRUE(group.ok()) << group.status();
      body(static_cast<GlooProcessGroup&>(**group));
    });
  }
  for (auto& t : threads) t.join();
}

std::vector<std::string> SegmentsTagged(const std::string& tag) {
  std::vector<std::string> found;
  const std::string prefix = "trainyard-" + tag + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) == 0) found.push_back(name);
  }
  return found;
}

TEST(ShmCommTest, TheSegmentIsUnlinkedOnceEveryRankMappedIt) {
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(5);
  options.shm_tag = "test-" + RandomHex(8);
  RunRanks(3, options, [&](GlooProcessGroup& g) {
    EXPECT_EQ(g.transport(), "shm");
    // Created, mapped by all three and unlinked before Create returned: a crash from here on
    // leaves nothing in /dev/shm.
    EXPECT_EQ(SegmentsTagged(options.shm_tag), std::vector<std::string>{});
    Tensor t = Full({100}, 1.0);
    ASSERT_TRUE(WaitFor(g, *g.AllReduce(t)).ok());
    EXPECT_EQ(t.data<float>()[99], 3.0f);
  });
}

TEST(ShmCommTest, AGroupThatCannotMakeTheSegmentRunsOverTcp) {
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(5);
  options.shm_tag = std::string(300, 'x');  // longer than a file name may be
  RunRanks(2, options, [&](GlooProcessGroup& g) {
    EXPECT_EQ(g.transport(), "tcp");
    Tensor t = Full({100}, 2.0);
    ASSERT_TRUE(WaitFor(g, *g.AllReduce(t)).ok());
    EXPECT_EQ(t.data<float>()[0], 4.0f);
  });
}

TEST(ShmCommTest, EveryRankHoldsTheSameBitsAsTheRankOrderSum) {
  // 3 ranks, 2.5 MiB of random floats: several rounds, slices of uneven length.
  constexpr int kRanks = 3;
  constexpr int64_t kCount = (5 << 20) / 8 + 3;
  std::vector<std::vector<float>> inputs(kRanks), outputs(kRanks);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (auto& in : inputs) {
    in.resize(kCount);
    for (float& x : in) x = normal(rng);
  }
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(10);
  RunRanks(kRanks, options, [&](GlooProcessGroup& g) {
    ASSERT_EQ(g.transport(), "shm");
    Tensor t = FromVector(inputs[g.rank()]);
    ASSERT_TRUE(WaitFor(g, *g.AllReduce(t)).ok());
    outputs[g.rank()] = ToVector<float>(t);
  });
  for (int64_t i = 0; i < kCount; ++i) {
    const float expected = (inputs[0][i] + inputs[1][i]) + inputs[2][i];
    ASSERT_EQ(outputs[0][i], expected) << "at " << i;
    ASSERT_EQ(std::memcmp(&outputs[1][i], &outputs[0][i], 4), 0) << "rank 1 at " << i;
    ASSERT_EQ(std::memcmp(&outputs[2][i], &outputs[0][i], 4), 0) << "rank 2 at " << i;
  }
}

TEST(ShmCommTest, ReducingSlicesThenGatheringThemIsTheAllReduce) {
  // The two halves of the hierarchical all-reduce, with nothing across hosts in between.
  constexpr int kRanks = 3;
  constexpr size_t kCount = (3 << 20) / 4 + 5;  // several rounds of uneven slices
  auto server = TcpStoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::vector<float>> whole(kRanks), halves(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto store = TcpStore::Connect((*server)->address(), std::chrono::seconds(5));
      ASSERT_TRUE(store.ok()) << store.status();
      auto comm =
          internal::ShmComm::Create(**store, {0, 1, 2}, r, "slices", std::chrono::seconds(10));
      ASSERT_TRUE(comm.ok()) << comm.status();
      auto sum = internal::GetReduceFn(DType::kFloat32, ReduceOp::kSum);
      std::vector<float> v(kCount);
      for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<float>((r + 1) * (i % 11)) / 8;
      whole[r] = halves[r] = v;
      ASSERT_TRUE((*comm)->AllReduce(whole[r].data(), kCount, 4, sum).ok());
      ASSERT_TRUE((*comm)->ReduceSlices(halves[r].data(), kCount, 4, sum).ok());
      ASSERT_TRUE((*comm)->GatherSlices(halves[r].data(), kCount, 4).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(whole[r][i], static_cast<float>(6 * (i % 11)) / 8) << "rank " << r << " at " << i;
      ASSERT_EQ(halves[r][i], whole[r][i]) << "rank " << r << " at " << i;
    }
  }
}

TEST(ShmCommTest, OrphanedSegmentsAreRemovedAndLiveOnesKept) {
  const std::string dir = ::testing::TempDir() + "/orphans-" + RandomHex(8);
  std::filesystem::create_directories(dir);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // a pid that no longer runs
  const std::string dead = "trainyard-job-" + std::to_string(child) + "-0123456789ab";
  const std::string live = "trainyard-job-" + std::to_string(::getpid()) + "-0123456789ab";
  for (const std::string& name : {dead, live, std::string("trainyard-odd"), std::string("other")}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  EXPECT_EQ(RemoveOrphanedSegments(dir), 1);
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + dead));
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + live));
  EXPECT_TRUE(std::filesystem::exists(dir + "/trainyard-odd"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/other"));
  std::filesystem::remove_all(dir);
}

TEST(ShmCommTest, ANetworkNamespaceIsAHostOfItsOwn) {
  const std::string here = internal::HostKey();
  EXPECT_EQ(internal::HostKey(), here);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    const std::string key = ::unshare(CLONE_NEWNET) == 0 ? internal::HostKey() : "";
    const ssize_t wrote = ::write(fds[1], key.data(), key.size());
    ::_exit(wrote == static_cast<ssize_t>(key.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string theirs;
  char buf[512];
  for (ssize_t got; (got = ::read(fds[0], buf, sizeof(buf))) > 0;) theirs.append(buf, got);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (theirs.empty()) GTEST_SKIP() << "cannot make a network namespace here (needs root)";
  EXPECT_NE(theirs, here);
  // The same machine and boot: only the namespace part differs.
  EXPECT_EQ(theirs.substr(0, theirs.rfind('/')), here.substr(0, here.rfind('/')));
}

}  // namespace
}  // namespace trainyard::dist
#endif  // TY_HAVE_GLOO
