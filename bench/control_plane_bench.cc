// The service's control plane under load: one real trainyard-coordinator with `--workers`
// simulated workers (each registers and heartbeats every second on its own stream) and
// `--watchers` clients watching jobs, for `--seconds`. Reports the coordinator's CPU use and
// the heartbeat latency (sent to applied, from its trainyard_heartbeat_latency_seconds
// histogram). Then the latency from submit to the first step with real worker daemons, and
// how long `trainyard local` takes to start its coordinator and workers.
//   build/bench/control_plane_bench [--workers 1000] [--watchers 100] [--seconds 20]
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

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

// One simulated worker: registers, then heartbeats every second on one stream until `stop`.
void SimulatedWorker(std::shared_ptr<grpc::Channel> channel, int i, const std::atomic<bool>* stop,
                     std::atomic<int>* registered) {
  auto stub = v1::Worker::NewStub(channel);
  const std::string name = "sim-" + std::to_string(i);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_host("10.0.0." + std::to_string(i % 250));
    req.set_cpu_slots(1);
    v1::RegisterWorkerResponse resp;
    if (!stub->RegisterWorker(&ctx, req, &resp).ok()) return;
  }
  ++*registered;
  grpc::ClientContext ctx;
  auto stream = stub->Heartbeat(&ctx);
  // Spread the beats over the second, as independent workers would be.
  std::this_thread::sleep_for(std::chrono::milliseconds((i * 7919) % 1000));
  auto next = SteadyClock::now();
  while (!stop->load()) {
    v1::WorkerHeartbeat hb;
    hb.set_name(name);
    hb.set_sent_unix_us(std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
    if (!stream->Write(hb)) break;
    next += 1s;
    while (!stop->load() && SteadyClock::now() < next) std::this_thread::sleep_for(50ms);
  }
  ctx.TryCancel();
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

void ControlPlane(int workers, int watchers, int seconds) {
  TempDir dir;
  testing::Cluster cluster(dir.path(), {0, 1, 30, {}, {}, {}});
  std::string error;
  if (!cluster.StartCoordinator(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  rlimit nofile{65536, 65536};
  ::setrlimit(RLIMIT_NOFILE, &nofile);
  std::atomic<bool> stop{false};
  std::atomic<int> registered{0};
  std::vector<std::thread> threads;
  // A few channels (connections), as many nodes behind one load balancer would look.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < 8; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", c);  // distinct channels, not one shared subchannel
    channels.push_back(
        grpc::CreateCustomChannel(cluster.address(), grpc::InsecureChannelCredentials(), args));
  }
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back(SimulatedWorker, channels[i % channels.size()], i, &stop, &registered);
  }
  testing::WaitUntil([&] { return registered.load() == workers; }, 60s);
  // Jobs to watch (one rank each; they sit SCHEDULED on simulated workers that never run them).
  std::vector<std::string> ids;
  for (int j = 0; j < 10; ++j) {
    auto job = cluster.client().Submit(
        R"({"name":"watched","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},"optimizer":{"sgd":{}},"steps":10})");
    if (job.ok()) ids.push_back(job->id());
  }
  std::atomic<int64_t> events{0};
  std::vector<std::unique_ptr<client::ServiceClient>> watch_clients;
  for (int w = 0; w < watchers && !ids.empty(); ++w) {
    client::ConnectOptions o;
    o.coordinator = cluster.address();
    watch_clients.push_back(*client::ServiceClient::Connect(o));
    client::ServiceClient* c = watch_clients.back().get();
    const std::string id = ids[static_cast<size_t>(w) % ids.size()];
    threads.emplace_back([c, id, &events, &stop] {
      (void)c->Watch(
          id,
          [&](const v1::JobEvent&) {
            ++events;
            return !stop.load();
          },
          1s);
    });
  }
  std::this_thread::sleep_for(3s);  // let every stream settle
  const Histogram before = Scrape(cluster.metrics_address(), "trainyard_heartbeat_latency_seconds");
  const double cpu0 = CpuSeconds(cluster.coordinator().pid());
  const auto t0 = SteadyClock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double cpu = CpuSeconds(cluster.coordinator().pid()) - cpu0;
  const double wall = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  const Histogram h =
      Minus(Scrape(cluster.metrics_address(), "trainyard_heartbeat_latency_seconds"), before);
  const int alive = cluster.AliveWorkers();
  const int coordinator_threads = Threads(cluster.coordinator().pid());
  // Unblock the watchers (they return at their next event or when the coordinator stops).
  stop = true;
  cluster.coordinator().Kill(SIGTERM);
  for (std::thread& t : threads) t.join();
  std::printf("control plane: %d simulated workers heartbeating every 1 s, %d watchers, %.0f s\n",
              workers, watchers, wall);
  std::printf("  workers alive            %d of %d\n", alive, workers);
  std::printf("  coordinator CPU          %.1f%% of one core (%.2f s in %.1f s), %d threads\n",
              100 * cpu / wall, cpu, wall, coordinator_threads);
  std::printf("  heartbeats applied       %.0f (%.0f/s)\n", h.count, h.count / wall);
  std::printf("  heartbeat latency        mean %.2f ms, p50 <= %.2f ms, p99 <= %.2f ms\n",
              h.count > 0 ? 1e3 * h.sum / h.count : 0, 1e3 * h.Quantile(0.5),
              1e3 * h.Quantile(0.99));
  std::printf("  watch events received    %lld\n", static_cast<long long>(events.load()));
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
  ControlPlane(Flag(argc, argv, "--workers", 1000), Flag(argc, argv, "--watchers", 100),
               Flag(argc, argv, "--seconds", 20));
  FirstStep(Flag(argc, argv, "--rounds", 3));
  return 0;
}
