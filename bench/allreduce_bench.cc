// All-reduce of float32 tensors over GlooProcessGroup on loopback, timed. bench/torch_allreduce.py
// does the same with torch.distributed's gloo backend and scripts/bench-allreduce.sh prints the
// two side by side.
//
//   allreduce_bench [--nproc N] [--sizes-mb 1,16,64,256] [--algorithm auto|ring|ring_chunked]
//
// The launcher serves a TcpStore and runs N copies of itself as ranks (--rank R --store ADDR).
// Per size every rank runs one warm-up all-reduce, then `iters` timed ones, each ended by
// Work::Wait; rank 0 prints one JSON line per size with the median time and the bus bandwidth
// (busbw = bytes * 2(n-1)/n / time, NCCL's convention: what each link carries).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "worker/dist/process_group.h"
#include "worker/dist/store.h"
#include "worker/tensor/factories.h"

namespace ty = trainyard;
namespace dist = trainyard::dist;

namespace {

struct Flags {
  int nproc = 2;
  std::vector<int> sizes_mb = {1, 16, 64, 256};
  std::string algorithm = "auto";
  int rank = -1;  // >= 0: run as this rank
  std::string store;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "allreduce_bench: %s\nusage: allreduce_bench [--nproc N] [--sizes-mb 1,16,64,256] "
               "[--algorithm auto|ring|ring_chunked]\n",
               why.c_str());
  std::exit(2);
}

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--nproc") {
      f.nproc = std::atoi(v.c_str());
    } else if (a == "--sizes-mb") {
      f.sizes_mb.clear();
      std::stringstream in(v);
      for (std::string s; std::getline(in, s, ',');) f.sizes_mb.push_back(std::atoi(s.c_str()));
    } else if (a == "--algorithm") {
      f.algorithm = v;
    } else if (a == "--rank") {
      f.rank = std::atoi(v.c_str());
    } else if (a == "--store") {
      f.store = v;
    } else {
      Usage("unknown flag " + a);
    }
  }
  if (f.nproc < 1) Usage("--nproc must be at least 1");
  return f;
}

// Timed iterations per size: enough to take a median, few enough for the 2-minute budget.
int ItersFor(int mb) { return mb == 0 ? 2000 : mb <= 1 ? 400 : mb <= 16 ? 50 : mb <= 64 ? 15 : 5; }

int RunRank(const Flags& f) {
  auto client = dist::TcpStore::Connect(f.store, std::chrono::seconds(30));
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.status().ToString().c_str()), 1;
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);
  options.algorithm = f.algorithm;
  auto group = dist::CreateProcessGroup("gloo", *client, f.rank, f.nproc, options);
  if (!group.ok()) return std::fprintf(stderr, "%s\n", group.status().ToString().c_str()), 1;
  dist::ProcessGroup& g = **group;
  for (int mb : f.sizes_mb) {
    const int64_t numel = std::max<int64_t>(1, int64_t(mb) * (1 << 20) / 4);  // 0: one float
    ty::Tensor t = ty::Full({numel}, 1.0);
    std::vector<double> seconds;
    for (int i = -1; i < ItersFor(mb); ++i) {
      ty::Status st = dist::WaitFor(g, *g.Barrier());
      const auto t0 = std::chrono::steady_clock::now();
      if (st.ok()) st = dist::WaitFor(g, *g.AllReduce(t));
      const auto t1 = std::chrono::steady_clock::now();
      if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
      if (i >= 0) seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    const double bytes = double(numel) * 4;
    const double busbw = bytes * 2 * (f.nproc - 1) / f.nproc / median / 1e9;
    if (f.rank == 0) {
      std::printf(
          "{\"impl\": \"trainyard\", \"nproc\": %d, \"size_mb\": %d, \"iters\": %zu, "
          "\"time_ms\": %.4f, \"busbw_gbps\": %.3f}\n",
          f.nproc, mb, seconds.size(), median * 1e3, busbw);
      std::fflush(stdout);
    }
  }
  return 0;
}

int Launch(const Flags& f, const char* self) {
  auto server = dist::TcpStoreServer::Start();
  if (!server.ok()) return std::fprintf(stderr, "%s\n", server.status().ToString().c_str()), 1;
  std::string sizes;
  for (int mb : f.sizes_mb) sizes += (sizes.empty() ? "" : ",") + std::to_string(mb);
  std::vector<pid_t> children;
  for (int r = 0; r < f.nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string rank = std::to_string(r), nproc = std::to_string(f.nproc);
      const std::string store = (*server)->address();
      ::execl(self, self, "--nproc", nproc.c_str(), "--sizes-mb", sizes.c_str(), "--algorithm",
              f.algorithm.c_str(), "--rank", rank.c_str(), "--store", store.c_str(), nullptr);
      ::_exit(127);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  if (f.rank >= 0) return RunRank(f);
  return Launch(f, "/proc/self/exe");
}
