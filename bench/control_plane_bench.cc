// The service's control plane under load: one real trainyard-coordinator with `--workers`
// simulated workers (each registers and heartbeats every second on its own stream:
// sim_fleet.h) and `--watchers` clients watching jobs, for `--seconds`. Reports the
// coordinator's CPU use and threads and the heartbeat latency (sent to applied, from its
// trainyard_heartbeat_latency_seconds histogram). Then (--restart 1) a full restart: the
// coordinator stopped and started again on its state directory, timed until every worker is
// registered and heartbeating again. Then (--rounds N, 0: none) the latency from submit to the
// first step with real worker daemons, and how long `trainyard local` takes to start its
// coordinator and workers.
//   build/bench/control_plane_bench [--workers 10000] [--watchers 1000] [--seconds 20]
//                                   [--restart 1] [--rounds 3]
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "bench/sim_fleet.h"
#include "tests/testing/cluster.h"

namespace {

using namespace trainyard;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// A fresh directory under /tmp, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/ty_bench_XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "/tmp";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

double CpuSeconds(pid_t pid) {
  const std::string stat = testing::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15; ++i) {
    rest >> field;
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int Threads(pid_t pid) {
  std::istringstream in(testing::ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return 0;
}

// Quantile q of a Prometheus histogram from its cumulative buckets (upper bound of the bucket).
struct Histogram {
  std::vector<std::pair<double, double>> buckets;  // le, cumulative count
  double sum = 0, count = 0;
  double Quantile(double q) const {
    for (const auto& [le, n] : buckets) {
      if (n >= q * count) return le;
    }
    return INFINITY;
  }
};

Histogram Scrape(const std::string& metrics, const std::string& name) {
  Histogram h;
  std::istringstream in(testing::HttpGet(metrics, "/metrics"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "_bucket{le=\"", 0) == 0) {
      const size_t q = line.find('"') + 1;
      const std::string le = line.substr(q, line.find('"', q) - q);
      h.buckets.emplace_back(le == "+Inf" ? INFINITY : std::stod(le),
                             std::stod(line.substr(line.rfind(' ') + 1)));
    } else if (line.rfind(name + "_sum", 0) == 0) {
      h.sum = std::stod(line.substr(line.rfind(' ') + 1));
    } else if (line.rfind(name + "_count", 0) == 0) {
      h.count = std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return h;
}

Histogram Minus(const Histogram& a, const Histogram& b) {
  Histogram d = a;
  for (size_t i = 0; i < d.buckets.size() && i < b.buckets.size(); ++i)
    d.buckets[i].second -= b.buckets[i].second;
  d.sum -= b.sum;
  d.count -= b.count;
  return d;
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

// Jobs to watch (one rank each; they sit SCHEDULED on simulated workers that never run them).
std::vector<std::string> SubmitWatchedJobs(testing::Cluster& cluster) {
  std::vector<std::string> ids;
  for (int j = 0; j < 10; ++j) {
    auto job = cluster.client().Submit(
        R"({"name":"watched","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},"optimizer":{"sgd":{}},"steps":10})");
    if (job.ok()) ids.push_back(job->id());
  }
  return ids;
}

// `n` clients watching the jobs `ids` round robin, each on its own connection and thread,
// until Stop.
class Watchers {
 public:
  Watchers(const std::string& address, const std::vector<std::string>& ids, int n)
      : stops_(static_cast<size_t>(n)) {
    for (int w = 0; w < n && !ids.empty(); ++w) {
      client::ConnectOptions o;
      o.coordinator = address;
      clients_.push_back(*client::ServiceClient::Connect(o));
      client::ServiceClient* c = clients_.back().get();
      const std::string id = ids[static_cast<size_t>(w) % ids.size()];
      client::WatchStop* stop = &stops_[static_cast<size_t>(w)];
      threads_.emplace_back([this, c, id, stop] {
        (void)c->Watch(
            id, [&](const v1::JobEvent&) { return ++events_ > 0; }, 1s, stop);
      });
    }
  }
  ~Watchers() { Stop(); }
  void Stop() {
    for (client::WatchStop& s : stops_) s.Stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  int64_t events() const { return events_.load(); }

 private:
  std::vector<std::unique_ptr<client::ServiceClient>> clients_;
  std::vector<client::WatchStop> stops_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> events_{0};
};

// Eight channels (connections), as many nodes behind one load balancer would look.
std::vector<std::shared_ptr<grpc::Channel>> Channels(const std::string& address) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < 8; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", c);  // distinct channels, not one shared subchannel
    channels.push_back(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  return channels;
}

// The steady state for `seconds`: the coordinator's CPU and threads, the heartbeat latency.
void Measure(testing::Cluster& cluster, int workers, int watchers, int seconds) {
  const std::string hist = "trainyard_heartbeat_latency_seconds";
  const Histogram before = Scrape(cluster.metrics_address(), hist);
  const double cpu0 = CpuSeconds(cluster.coordinator().pid());
  const auto t0 = SteadyClock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double cpu = CpuSeconds(cluster.coordinator().pid()) - cpu0;
  const double wall = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  const Histogram h = Minus(Scrape(cluster.metrics_address(), hist), before);
  std::printf("control plane: %d simulated workers heartbeating every 1 s, %d watchers, %.0f s\n",
              workers, watchers, wall);
  std::printf("  workers alive            %d of %d\n", cluster.AliveWorkers(), workers);
  std::printf("  coordinator CPU          %.1f%% of one core (%.2f s in %.1f s), %d threads\n",
              100 * cpu / wall, cpu, wall, Threads(cluster.coordinator().pid()));
  std::printf("  heartbeats applied       %.0f (%.0f/s)\n", h.count, h.count / wall);
  std::printf("  heartbeat latency        mean %.2f ms, p50 <= %.2f ms, p99 <= %.2f ms\n",
              h.count > 0 ? 1e3 * h.sum / h.count : 0, 1e3 * h.Quantile(0.5),
              1e3 * h.Quantile(0.99));
}

// Stops the coordinator (SIGTERM), starts it again on the same state directory and port, and
// times until every simulated worker has registered again and written a heartbeat on its new
// stream, and the coordinator lists them all alive.
void Restart(testing::Cluster& cluster, bench::SimFleet& fleet, int workers) {
  fleet.NewEpoch();
  const auto t0 = SteadyClock::now();
  cluster.coordinator().Kill(SIGTERM);
  const auto stopped = SteadyClock::now();
  std::string error;
  if (!cluster.StartCoordinator(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  const auto up = SteadyClock::now();
  const bool back = testing::WaitUntil([&] { return fleet.back() == workers; }, 120s);
  const bool alive = testing::WaitUntil([&] { return cluster.AliveWorkers() == workers; }, 30s);
  const auto all = SteadyClock::now();
  const Histogram h = Scrape(cluster.metrics_address(), "trainyard_heartbeat_latency_seconds");
  auto s = [&](SteadyClock::time_point t) { return std::chrono::duration<double>(t - t0).count(); };
  std::printf("restart: SIGTERM, then the coordinator again on the same state dir\n");
  std::printf("  stopped (every stream ended)   %.2f s\n", s(stopped));
  std::printf("  serving again                  %.2f s\n", s(up));
  std::printf(
      "  all %d back (registered, heartbeating)  %.2f s%s (%d re-registered, %d alive, "
      "%.0f heartbeats applied)\n",
      workers, s(all), back && alive ? "" : " NOT ALL", fleet.back(), cluster.AliveWorkers(),
      h.count);
}

void ControlPlane(int workers, int watchers, int seconds, bool restart) {
  TempDir dir;
  testing::Cluster cluster(dir.path(), {0, 1, 30, {}, {}, {}});
  std::string error;
  if (!cluster.StartCoordinator(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  rlimit nofile{65536, 65536};
  ::setrlimit(RLIMIT_NOFILE, &nofile);
  bench::SimFleet fleet(Channels(cluster.address()), workers);
  fleet.Start();
  testing::WaitUntil([&] { return fleet.back() == workers; }, 120s);
  Watchers watching(cluster.address(), SubmitWatchedJobs(cluster), watchers);
  std::this_thread::sleep_for(3s);  // let every stream settle
  Measure(cluster, workers, watchers, seconds);
  std::printf("  watch events received    %lld\n", static_cast<long long>(watching.events()));
  std::printf("  commands received        %lld\n", static_cast<long long>(fleet.commands()));
  watching.Stop();
  if (restart) Restart(cluster, fleet, workers);
  fleet.Stop();
  cluster.coordinator().Kill(SIGTERM);
}

// Submit to the first step with real workers, and local's start-up (coordinator + workers up).
void FirstStep(int rounds) {
  std::vector<double> startups, first_steps;
  for (int r = 0; r < rounds; ++r) {
    TempDir dir;
    const auto t0 = SteadyClock::now();
    testing::Cluster cluster(dir.path(), {});
    std::string error;
    if (!cluster.Start(&error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      std::exit(1);
    }
    const auto t1 = SteadyClock::now();
    auto job = cluster.client().Submit(
        R"({"name":"first","model":{"mlp":{"sizes":[784,512,256,10]}},"data":{"fashion_mnist":{}},)"
        R"("optimizer":{"adamw":{}},"batch_size":64,"steps":20,"parallelism":{"world_size":2}})");
    if (!job.ok()) {
      std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
      std::exit(1);
    }
    const auto submitted = SteadyClock::now();
    testing::JobWatch watch(cluster.client(), job->id());
    watch.Wait([](const v1::JobEvent& e) { return e.has_step(); }, 60s);
    const auto first = SteadyClock::now();
    watch.WaitDone(60s);
    startups.push_back(std::chrono::duration<double>(t1 - t0).count());
    first_steps.push_back(std::chrono::duration<double>(first - submitted).count());
  }
  std::sort(startups.begin(), startups.end());
  std::sort(first_steps.begin(), first_steps.end());
  std::printf("first step (fashion-mlp, 2 workers, median of %d)\n", rounds);
  std::printf("  coordinator + 2 workers up     %.2f s (what trainyard local waits for)\n",
              startups[startups.size() / 2]);
  std::printf(
      "  submit to first step           %.2f s (scheduling, rank start, data load, rendezvous)\n",
      first_steps[first_steps.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  ControlPlane(Flag(argc, argv, "--workers", 10000), Flag(argc, argv, "--watchers", 1000),
               Flag(argc, argv, "--seconds", 20), Flag(argc, argv, "--restart", 1) != 0);
  if (const int rounds = Flag(argc, argv, "--rounds", 3); rounds > 0) FirstStep(rounds);
  return 0;
}
