#include "worker/daemon/daemon.h"

#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "common/durable_file.h"
#include "common/logging.h"
#include "trainyard/v1/service.grpc.pb.h"
#include "worker/daemon/lease.h"
#include "worker/daemon/rank.h"
#include "worker/daemon/rank_supervisor.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/ranks/env.h"

namespace trainyard::daemon {
namespace {

namespace v1 = ::trainyard::v1;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// A rank's step, eval or checkpoint line as a MetricsReport.
std::optional<v1::MetricsReport> ToReport(const v1::RankStatus& who, const Json& line) {
  auto num = [&](const char* key) {
    const Json* v = line.Find(key);
    return v && v->is_number() ? v->number_value() : std::nan("");
  };
  auto integer = [&](const char* key) {
    const Json* v = line.Find(key);
    return v && v->is_integer() ? v->int_value() : int64_t{0};
  };
  v1::MetricsReport r;
  r.set_job_id(who.job_id());
  r.set_attempt(who.attempt());
  const std::string type = line.Find("type")->string_value();
  if (type == "step") {
    v1::StepMetrics* m = r.mutable_step();
    m->set_rank(who.rank());
    m->set_step(integer("step"));
    m->set_total_steps(integer("total_steps"));
    m->set_epoch(integer("epoch"));
    m->set_loss(num("loss"));
    m->set_lr(num("lr"));
    m->set_grad_norm(num("grad_norm"));
    m->set_samples_per_second(num("samples_per_second"));
    m->set_tokens_per_second(num("tokens_per_second"));
    m->set_data_seconds(num("data_seconds"));
    m->set_forward_seconds(num("forward_seconds"));
    m->set_backward_seconds(num("backward_seconds"));
    m->set_allreduce_wait_seconds(num("allreduce_wait_seconds"));
    m->set_optimizer_seconds(num("optimizer_seconds"));
    m->set_allreduce_seconds(num("allreduce_seconds"));
    m->set_allreduce_bus_bandwidth(num("allreduce_bus_bandwidth"));
    m->set_tensor_memory_allocated_bytes(integer("memory_allocated_bytes"));
    m->set_tensor_memory_reserved_bytes(integer("memory_reserved_bytes"));
    m->set_tensor_memory_peak_bytes(integer("memory_peak_bytes"));
  } else if (type == "eval") {
    r.mutable_eval()->set_step(integer("step"));
    r.mutable_eval()->set_loss(num("loss"));
    r.mutable_eval()->set_accuracy(num("accuracy"));
    r.mutable_eval()->set_samples(integer("samples"));
  } else if (type == "checkpoint") {
    const Json* dir = line.Find("dir");
    if (dir == nullptr || !dir->is_string()) return std::nullopt;
    r.set_checkpoint(dir->string_value());
  } else {
    return std::nullopt;
  }
  return r;
}

class Daemon {
 public:
  Daemon(const DaemonOptions& o, const std::atomic<bool>* stop)
      : o_(o), stop_(stop), lease_(o.lease) {}

  int Run() {
    registry_ = std::make_shared<prometheus::Registry>();
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(o_.metrics_listen);
    } catch (const std::exception& e) {
      TY_LOG(ERROR) << "--metrics-listen " << o_.metrics_listen << ": " << e.what();
      return 1;
    }
    exposer_->RegisterCollectable(registry_);
    metrics_ = std::make_unique<WorkerMetrics>(*registry_, o_.cpu_slots);
    const auto ports = exposer_->GetListeningPorts();
    // What others can scrape: a wildcard bind (0.0.0.0, [::], or no host) is reached at --host.
    std::string bind_host = o_.metrics_listen.substr(0, o_.metrics_listen.rfind(':'));
    if (bind_host.empty() || bind_host == "0.0.0.0" || bind_host == "[::]") {
      const bool ipv6 = o_.host.find(':') != std::string::npos && o_.host.front() != '[';
      bind_host = ipv6 ? "[" + o_.host + "]" : o_.host;
    }
    metrics_address_ = bind_host + ":" + std::to_string(ports.empty() ? 0 : ports[0]);
    StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(o_.coordinator, o_.channel);
    if (!channel.ok()) {
      TY_LOG(ERROR) << channel.status().message();
      return 2;
    }
    stub_ = v1::Worker::NewStub(*channel);
    TY_LOG(INFO) << "worker " << o_.name << " (" << o_.host
                 << (o_.interface.empty() ? "" : " on " + o_.interface) << ", " << o_.cpu_slots
                 << " CPU slots, " << o_.gpus.size() << " GPUs) for coordinator " << o_.coordinator
                 << ", metrics on http://" << metrics_address_ << "/metrics";
    std::thread supervisor([this] { Supervise(); });
    std::thread sender([this] { SendMetrics(); });
    Control();
    done_ = true;
    commands_cv_.notify_all();
    metrics_cv_.notify_all();
    supervisor.join();
    sender.join();
    return 0;
  }

 private:
  // ---- The supervisor thread: every rank process is forked here (rank_supervisor.h) ----
  void Supervise() {
    SupervisorOptions so;
    so.work_dir = o_.work_dir;
    so.grace = o_.grace;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    so.threads_per_rank = o_.threads_per_rank > 0 ? o_.threads_per_rank
                                                  : std::max(1, cores / std::max(1, o_.cpu_slots));
    so.env = RankEnv();
    so.on_report = [this](const v1::RankStatus& who, const Json& line) {
      if (line.Find("type")->string_value() == "step") metrics_->OnStep(who, line);
      std::optional<v1::MetricsReport> r = ToReport(who, line);
      if (!r) return;
      r->set_worker(o_.name);
      std::lock_guard<std::mutex> lock(metrics_mu_);
      if (metrics_queue_.size() < 100000) metrics_queue_.push_back(std::move(*r));
      ++metrics_enqueued_;
      metrics_cv_.notify_all();
    };
    RankSupervisor ranks(so);
    bool stopping = false;
    while (true) {
      std::deque<v1::WorkerCommand> commands;
      {
        std::lock_guard<std::mutex> lock(commands_mu_);
        commands.swap(commands_);
      }
      for (const v1::WorkerCommand& c : commands) {
        if (stopping && c.has_assign()) {
          TY_LOG(WARNING) << "stopping: not starting ranks of " << c.assign().job_id();
          continue;
        }
        Apply(ranks, c);
      }
      CheckLease(ranks);
      if (stop_->load() && !stopping) {
        stopping = true;
        stopping_ = true;
        ranks.StopAll(/*checkpoint=*/true);
      }
      ranks.Poll(100ms);
      Publish(ranks.Statuses());
      if (stopping && ranks.running() == 0) break;
      if (done_) break;
    }
    supervisor_done_ = true;
  }

  // What every rank gets besides its place: the coordinator, the numeric address its Gloo
  // listens on (never loopback when this worker advertises another address), credentials, and
  // with --interface NCCL's and Gloo's interface unless this environment names one.
  std::vector<std::string> RankEnv() const {
    const std::string listen = o_.listen_host.empty() ? o_.host : o_.listen_host;
    std::vector<std::string> env = {
        std::string(ranks::kCoordinatorEnv) + "=" + o_.coordinator,
        std::string(ranks::kHostEnv) + "=" + listen,
        std::string(ranks::kTokenEnv) + "=" + o_.token,
        std::string(ranks::kCaEnv) + "=" + o_.channel.tls.ca,
        std::string(ranks::kCertEnv) + "=" + o_.channel.tls.cert,
        std::string(ranks::kKeyEnv) + "=" + o_.channel.tls.key,
        std::string(ranks::kServerNameEnv) + "=" + o_.channel.tls_server_name};
    for (std::string& e : ranks::SocketInterfaceEnv(o_.interface)) env.push_back(std::move(e));
    return env;
  }

  void Apply(RankSupervisor& ranks, const v1::WorkerCommand& c) {
    if (c.has_assign()) {
      Status s = ranks.Start(c.assign());
      if (!s.ok()) {
        TY_LOG(ERROR) << "assignment of " << c.assign().job_id() << ": " << s.message();
      }
    } else if (c.has_abort() || c.has_cancel()) {
      const v1::StopRanks& s = c.has_abort() ? c.abort() : c.cancel();
      ranks.Stop(s.job_id(), s.attempt(), s.checkpoint());
    } else if (c.has_regroup()) {
      ranks.Regroup(c.regroup());  // an elastic job's ranks here continue in a new group
    }
  }

  // Stops every rank once the coordinator was silent for longer than the lease (lease.h):
  // SIGTERM, then SIGKILL after the grace; their exits are reported once registered again.
  void CheckLease(RankSupervisor& ranks) {
    const std::optional<std::chrono::milliseconds> silence = lease_.Expired(SteadyClock::now());
    if (!silence || ranks.running() == 0) return;
    TY_LOG(WARNING) << LeaseLostMessage(*silence, lease_.lease(), ranks.Statuses());
    ranks.StopAll(/*checkpoint=*/true);
  }

  // The statuses heartbeats carry. Note [Exit after metrics]: a rank's exit is held back until
  // the metrics it sent before exiting went out (at most 3 s), so that the coordinator has a
  // job's final evaluation when it marks the job SUCCEEDED.
  void Publish(std::vector<v1::RankStatus> statuses) {
    const auto now = SteadyClock::now();
    int64_t sent;
    {
      std::lock_guard<std::mutex> lock(metrics_mu_);
      sent = metrics_sent_;
    }
    std::lock_guard<std::mutex> lock(status_mu_);
    for (v1::RankStatus& s : statuses) {
      if (!s.exited()) continue;
      auto key = std::make_tuple(s.job_id(), s.attempt(), s.rank());
      auto it = exit_marks_.find(key);
      if (it == exit_marks_.end()) {
        std::lock_guard<std::mutex> mlock(metrics_mu_);
        it = exit_marks_.emplace(key, std::make_pair(metrics_enqueued_, now)).first;
      }
      if (sent < it->second.first && now - it->second.second < 3s && !stopping_) {
        s.set_exited(false);
        s.set_report_age_ms(0);
      }
    }
    // Forget the marks of ranks the supervisor forgot.
    for (auto it = exit_marks_.begin(); it != exit_marks_.end();) {
      const bool known =
          std::any_of(statuses.begin(), statuses.end(), [&](const v1::RankStatus& s) {
            return std::make_tuple(s.job_id(), s.attempt(), s.rank()) == it->first;
          });
      it = known ? std::next(it) : exit_marks_.erase(it);
    }
    metrics_->OnStatuses(statuses);
    statuses_ = std::move(statuses);
  }

  std::vector<v1::RankStatus> Statuses() {
    std::lock_guard<std::mutex> lock(status_mu_);
    return statuses_;
  }

  // ---- The control loop (this thread): register, then heartbeat until the stream breaks ----
  void Control() {
    auto backoff = 200ms;
    while (!supervisor_done_) {
      if (Register()) {
        backoff = 200ms;
        metrics_->SetConnected(true);
        Heartbeat();
        metrics_->SetConnected(false);
      } else {
        // Several tries within a lease, so a coordinator that is back is found in time.
        const std::chrono::milliseconds lease = lease_.lease();
        const auto cap =
            lease.count() > 0 ? std::clamp<std::chrono::milliseconds>(lease / 4, 200ms, 5s) : 5s;
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, cap);
      }
      for (auto waited = 0ms; waited < backoff && !supervisor_done_; waited += 50ms) {
        std::this_thread::sleep_for(50ms);
      }
    }
  }

  bool Register() {
    v1::RegisterWorkerRequest req;
    req.set_name(o_.name);
    req.set_host(o_.host);
    req.set_cpu_slots(o_.cpu_slots);
    req.set_memory_bytes(o_.memory_bytes);
    for (const v1::Gpu& g : o_.gpus) *req.add_gpus() = g;
    req.set_metrics_address(metrics_address_);
    for (const v1::RankStatus& s : Statuses()) *req.add_ranks() = s;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    // Waits (up to the deadline) for the connection instead of failing at once while it is
    // down: a call in flight is what drives the channel's connection attempt (its TCP and TLS
    // handshakes); without one only gRPC's 5 s backup poller does, and a TLS connection after
    // a coordinator restart or a healed partition took 15 s or never completed.
    ctx.set_wait_for_ready(true);
    rpc::AddToken(&ctx, o_.token);
    v1::RegisterWorkerResponse resp;
    const grpc::Status s = stub_->RegisterWorker(&ctx, req, &resp);
    if (!s.ok()) {
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE || !warned_unavailable_) {
        TY_LOG(WARNING) << "registering with " << o_.coordinator << ": " << s.error_message();
      }
      warned_unavailable_ = s.error_code() == grpc::StatusCode::UNAVAILABLE;
      return false;
    }
    warned_unavailable_ = false;
    interval_ = std::chrono::milliseconds(std::max<int64_t>(10, resp.heartbeat_interval_ms()));
    lease_.Renew(SteadyClock::now(), resp.lease_ms());
    TY_LOG(INFO) << "registered with " << o_.coordinator << " as " << o_.name << " (lease "
                 << DescribeLease(lease_.lease()) << ")";
    if (!o_.ready_file.empty() && !ready_written_) {
      ready_written_ = true;
      if (Status s = WriteFileAtomically(o_.ready_file, metrics_address_ + "\n"); !s.ok()) {
        TY_LOG(ERROR) << "--ready-file: " << s.message();
      }
    }
    return true;
  }

  void Heartbeat() {
    grpc::ClientContext ctx;
    rpc::AddToken(&ctx, o_.token);
    auto stream = stub_->Heartbeat(&ctx);
    std::atomic<bool> broken{false};
    auto beat = [&] {
      v1::WorkerHeartbeat hb;
      hb.set_name(o_.name);
      hb.set_draining(stopping_.load());
      for (const v1::RankStatus& s : Statuses()) *hb.add_ranks() = s;
      hb.set_sent_unix_us(std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
      return stream->Write(hb);
    };
    if (!beat()) return;
    std::thread reader([&] {
      v1::WorkerCommand c;
      while (stream->Read(&c)) {
        lease_.Renew(SteadyClock::now(), c.has_ack() ? c.ack().lease_ms() : 0);
        if (c.has_ack()) continue;
        std::lock_guard<std::mutex> lock(commands_mu_);
        commands_.push_back(c);
      }
      broken = true;
    });
    auto next = SteadyClock::now() + interval_;
    bool announced_drain = false;
    while (!broken) {
      if (stopping_ && !announced_drain) {
        announced_drain = true;
        next = SteadyClock::now();  // say at once that this worker takes no new ranks
      }
      if (supervisor_done_) {
        beat();  // the last word: every rank's exit
        break;
      }
      if (SteadyClock::now() >= next) {
        if (!beat()) break;
        next += interval_;
        if (next < SteadyClock::now()) next = SteadyClock::now() + interval_;
      }
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(interval_, 50ms));
    }
    ctx.TryCancel();
    reader.join();
    const grpc::Status s = stream->Finish();
    if (!supervisor_done_) {
      TY_LOG(WARNING) << "heartbeat stream to " << o_.coordinator
                      << " ended: " << (s.ok() ? "closed" : s.error_message())
                      << "; registering again";
    }
  }

  // ---- The metrics thread: one ReportMetrics stream while there is something to send ----
  // Until done_, and then until what was queued before is sent (or a write fails).
  void SendMetrics() {
    bool failed_after_done = false;
    auto more = [&] {
      std::lock_guard<std::mutex> lock(metrics_mu_);
      return !done_ || (!metrics_queue_.empty() && !failed_after_done);
    };
    while (more()) {
      {
        std::unique_lock<std::mutex> lock(metrics_mu_);
        metrics_cv_.wait_for(lock, 500ms, [&] { return done_ || !metrics_queue_.empty(); });
        if (metrics_queue_.empty()) continue;
      }
      grpc::ClientContext ctx;
      rpc::AddToken(&ctx, o_.token);
      v1::ReportMetricsResponse resp;
      auto writer = stub_->ReportMetrics(&ctx, &resp);
      auto idle_since = SteadyClock::now();
      while (more() && SteadyClock::now() - idle_since < 10s) {
        std::deque<v1::MetricsReport> batch;
        {
          std::unique_lock<std::mutex> lock(metrics_mu_);
          metrics_cv_.wait_for(lock, 200ms, [&] { return done_ || !metrics_queue_.empty(); });
          batch.swap(metrics_queue_);
        }
        if (batch.empty()) continue;
        idle_since = SteadyClock::now();
        bool ok = true;
        for (const v1::MetricsReport& r : batch) ok = ok && writer->Write(r);
        std::lock_guard<std::mutex> lock(metrics_mu_);
        metrics_sent_ += static_cast<int64_t>(batch.size());  // sent or lost: not retried
        if (!ok) {
          failed_after_done = done_;
          break;
        }
      }
      writer->WritesDone();
      if (writer->Finish().ok()) LogRefused(resp);
    }
  }

  // Reports are never resent: a refused one (a stale attempt's) is dropped, its reason logged
  // once.
  void LogRefused(const v1::ReportMetricsResponse& resp) {
    for (const std::string& why : resp.refused()) {
      if (refusals_logged_.size() < 1000 && refusals_logged_.insert(why).second) {
        TY_LOG(WARNING) << "the coordinator refused metrics: " << why;
      }
    }
  }

  const DaemonOptions& o_;
  const std::atomic<bool>* stop_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<WorkerMetrics> metrics_;
  std::string metrics_address_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  std::chrono::milliseconds interval_{1000};
  WorkerLease lease_;
  std::set<std::string> refusals_logged_;  // metrics thread only
  bool warned_unavailable_ = false;
  bool ready_written_ = false;
  std::atomic<bool> done_{false};
  std::atomic<bool> supervisor_done_{false};
  std::atomic<bool> stopping_{false};  // SIGTERM: the ranks are being stopped

  std::mutex commands_mu_;
  std::condition_variable commands_cv_;
  std::deque<v1::WorkerCommand> commands_;

  std::mutex status_mu_;
  std::vector<v1::RankStatus> statuses_;
  std::map<std::tuple<std::string, int, int>, std::pair<int64_t, SteadyClock::time_point>>
      exit_marks_;  // supervisor thread only

  std::mutex metrics_mu_;
  std::condition_variable metrics_cv_;
  std::deque<v1::MetricsReport> metrics_queue_;
  int64_t metrics_enqueued_ = 0, metrics_sent_ = 0;
};

}  // namespace

int RunDaemon(const DaemonOptions& options, const std::atomic<bool>* stop) {
  return Daemon(options, stop).Run();
}

}  // namespace trainyard::daemon
