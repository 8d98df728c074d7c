// trainyard-worker: the worker daemon (daemon.h), and, as `trainyard-worker rank`, the rank
// processes it starts (rank.h).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/host_memory.h"
#include "common/net_address.h"
#include "common/signals.h"
#include "worker/daemon/daemon.h"
#include "worker/daemon/gpus.h"
#include "worker/daemon/rank.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Fail(const std::string& message) {
  std::fprintf(stderr, "trainyard-worker: error: %s\n", message.c_str());
  return 2;
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// --advertise-address (or its old name --host), --interface, or neither (net_address.h).
trainyard::StatusOr<trainyard::net::AdvertiseChoice> ChooseAddress(const trainyard::Flags& f,
                                                                   const std::string& coordinator) {
  const std::string& given = f.Get("advertise-address");
  const std::string& old = f.Get("host");
  if (!given.empty() && !old.empty() && given != old) {
    return trainyard::InvalidArgumentError("--advertise-address \"" + given + "\" and --host \"" +
                                           old + "\" differ; --host is its old name: give one");
  }
  trainyard::net::AdvertiseRequest r;
  r.advertise_address = given.empty() ? old : given;
  r.interface = f.Get("interface");
  r.coordinator = coordinator;
  r.host_name = HostName;
  return trainyard::net::ChooseAdvertiseAddress(r);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainyard;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "rank") return daemon::RunRank();

  Flags f(
      "usage: trainyard-worker [flags]\n\nRuns the ranks the coordinator assigns to this "
      "node.\n\nflags:");
  rpc::AddCallerFlags(f);
  f.Value("name", "", "this worker's name, unique and stable (default: the host name)")
      .Value("advertise-address", "",
             "address other nodes reach this worker's ranks at, which Gloo listens on (default: "
             "127.0.0.1 for a loopback coordinator, else this machine's address on the route "
             "to the coordinator, else the host name)")
      .Value("host", "", "the old name of --advertise-address")
      .Value("interface", "",
             "take --advertise-address from this network interface's IPv4 address (e.g. ctl0); "
             "ranks then get NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME = it unless set")
      .Value("cpu-slots", "1", "ranks this worker runs at once on CPUs")
      .Value("gpus", "auto", "GPU slots: auto (every visible GPU), none, or a count")
      .Value("memory-gib", "0",
             "memory its CPU ranks may use in all, GiB; the coordinator places no more ranks "
             "than their estimated memory fits (0: the machine's, or its cgroup's limit)")
      .Value("threads-per-rank", "0", "kernel threads of each rank (0: cores / cpu-slots)")
      .Value("metrics-listen", "127.0.0.1:9601", "Prometheus /metrics address (port 0 picks one)")
      .Value("work-dir", "trainyard-worker", "where rank specs are written")
      .Value("grace", "10", "seconds a stopping rank gets between SIGTERM and SIGKILL")
      .Value("lease", "0",
             "seconds without a word from the coordinator after which this worker stops its "
             "ranks, since the coordinator may have restarted their jobs elsewhere (0: the "
             "coordinator's lease, 3/4 of its --heartbeat-timeout)")
      .Value("ready-file", "", "write the metrics address here once registered");
  if (std::optional<int> code = f.ParseOrExit(args, "trainyard-worker", 0)) return *code;
  const rpc::CallerOptions caller = rpc::ReadCallerFlags(f);
  daemon::DaemonOptions o;
  o.coordinator = caller.coordinator;
  o.token = caller.token;
  o.channel = caller.channel;
  // A dead connection is noticed in about 10 s (the lease, 7.5 s by default, stops ranks
  // first), and dialled again at least every 4 s, so a worker is back within seconds of a
  // partition healing or the coordinator restarting.
  o.channel.keepalive_time = std::chrono::seconds(5);
  o.channel.keepalive_timeout = std::chrono::seconds(5);
  o.channel.max_reconnect_backoff = std::chrono::seconds(4);
  o.name = f.Get("name").empty() ? HostName() : f.Get("name");
  StatusOr<net::AdvertiseChoice> address = ChooseAddress(f, o.coordinator);
  if (!address.ok()) return Fail(std::string(address.status().message()));
  o.host = address->advertise;
  o.listen_host = address->listen;
  o.interface = f.Get("interface");
  StatusOr<int64_t> slots = f.Int("cpu-slots", 1, 4096);
  StatusOr<int64_t> threads = f.Int("threads-per-rank", 0, 1024);
  StatusOr<double> grace = f.Double("grace", 0, 3600);
  StatusOr<double> memory_gib = f.Double("memory-gib", 0, 1 << 24);
  StatusOr<double> lease = f.Double("lease", 0, 3600);
  for (const Status& s :
       {slots.status(), threads.status(), grace.status(), memory_gib.status(), lease.status()}) {
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  o.cpu_slots = static_cast<int>(*slots);
  o.memory_bytes =
      *memory_gib > 0 ? static_cast<int64_t>(*memory_gib * (1LL << 30)) : UsableMemoryBytes();
  StatusOr<std::vector<v1::Gpu>> gpus = daemon::DiscoverGpus(f.Get("gpus"));
  if (!gpus.ok()) return Fail(std::string(gpus.status().message()));
  o.gpus = *gpus;
  o.threads_per_rank = static_cast<int>(*threads);
  o.grace = std::chrono::milliseconds(std::llround(*grace * 1000));
  o.lease = std::chrono::milliseconds(std::llround(*lease * 1000));
  o.metrics_listen = f.Get("metrics-listen");
  o.work_dir = f.Get("work-dir");
  o.ready_file = f.Get("ready-file");
  ScopedStopSignals signals(OnSignal);
  return daemon::RunDaemon(o, &g_stop);
}
