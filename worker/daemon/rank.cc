#include "worker/daemon/rank.h"

#include "worker/daemon/gpus.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "common/signals.h"
#include "proto/rpc.h"
#include "worker/daemon/grpc_store.h"
#include "worker/dist/process_group.h"
#include "worker/trainer/trainer.h"

namespace trainyard::daemon {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};
void OnSignal(int sig) {
  if (g_stop.exchange(true)) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "trainyard rank: error: %s\n", message.c_str());
  std::fflush(stderr);
  return code;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Writes report lines to the daemon's pipe, one write each (lines are far below PIPE_BUF, so
// the reporter thread and the training thread never interleave).
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}
  void Send(const Json& line) {
    const std::string text = line.Dump() + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0) return;
    if (::write(fd_, text.data(), text.size()) < 0) fd_ = -1;  // the daemon is gone
  }

 private:
  std::mutex mu_;
  int fd_;
};

// Every half second: phase, step and collective progress (Note [Naming a hung rank] in
// server/health.h). Runs until `done`.
void ReportProgress(Reporter* reporter, const trainer::Progress* progress,
                    const dist::ProcessGroup* group, const std::atomic<bool>* done) {
  int64_t last_done = -1;
  auto done_changed = SteadyClock::now();
  while (!done->load()) {
    const auto now = SteadyClock::now();
    const int64_t issued = group ? group->collectives_issued() : 0;
    const int64_t finished = group ? group->collectives_done() : 0;
    if (finished != last_done) {
      last_done = finished;
      done_changed = now;
    }
    const int64_t now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    reporter->Send(Json::Object(
        {{"type", "status"},
         {"step", progress->step.load()},
         {"phase", trainer::PhaseName(static_cast<trainer::Phase>(progress->phase.load()))},
         {"phase_age_ms", (now_ns - progress->phase_since_ns.load()) / 1000000},
         {"issued", issued},
         {"done", finished},
         {"collective_age_ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - done_changed).count()}}));
    for (int i = 0; i < 10 && !done->load(); ++i) std::this_thread::sleep_for(50ms);
  }
}

struct Place {
  std::string coordinator, job_id, secret, spec_path, host;
  int attempt = 0, rank = 0, world_size = 1, report_fd = -1, slot = 0;
};

StatusOr<int> IntEnv(const char* name, int lo, int hi) {
  const std::string v = Env(name);
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi) {
    return InvalidArgumentError(std::string(name) + " = \"" + v + "\": must be an integer in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                                " (trainyard-worker sets it; a rank is not run by hand)");
  }
  return static_cast<int>(n);
}

StatusOr<Place> ReadPlace() {
  Place p;
  p.coordinator = Env(kCoordinatorEnv);
  p.job_id = Env(kJobEnv);
  p.secret = Env(kSecretEnv);
  p.spec_path = Env(kSpecEnv);
  p.host = Env(kHostEnv);
  for (const auto& [name, value] : {std::pair{kCoordinatorEnv, &p.coordinator},
                                    std::pair{kJobEnv, &p.job_id}, std::pair{kSpecEnv, &p.spec_path}}) {
    if (value->empty()) {
      return InvalidArgumentError(std::string(name) +
                                  " is not set (trainyard-worker sets it; a rank is not run by hand)");
    }
  }
  ASSIGN_OR_RETURN(p.attempt, IntEnv(kAttemptEnv, 1, 1 << 30));
  ASSIGN_OR_RETURN(p.world_size, IntEnv(kWorldSizeEnv, 1, 4096));
  ASSIGN_OR_RETURN(p.rank, IntEnv(kRankEnv, 0, p.world_size - 1));
  ASSIGN_OR_RETURN(p.report_fd, IntEnv(kReportFdEnv, -1, 1 << 20));
  if (!Env(kSlotEnv).empty()) {
    ASSIGN_OR_RETURN(p.slot, IntEnv(kSlotEnv, 0, 4095));
  }
  return p;
}

StatusOr<spec::JobSpec> ReadSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read the job spec " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(Json json, Json::Parse(ss.str()));
  return spec::ParseJobSpec(json);
}

StatusOr<std::shared_ptr<dist::ProcessGroup>> Join(const Place& p, const spec::JobSpec& spec) {
  rpc::ChannelOptions co;
  co.tls = {Env(kCaEnv), Env(kCertEnv), Env(kKeyEnv)};
  co.plaintext_remote = true;  // the daemon already applied the policy to this address
  co.tls_server_name = Env(kServerNameEnv);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, rpc::MakeChannel(p.coordinator, co));
  std::shared_ptr<dist::Store> store =
      NewGrpcStore(channel, {p.job_id, p.attempt, p.secret}, Env(kTokenEnv));
  const auto timeout =
      std::chrono::milliseconds(std::llround(spec.parallelism.collective_timeout_seconds * 1000));
  dist::ProcessGroupOptions options;
  options.timeout = timeout;
  options.algorithm = spec.parallelism.all_reduce_algorithm;
  options.hostname = p.host;
  // NCCL: the spec's "ring" pins NCCL_ALGO=Ring unless the operator's environment chose one.
  if (spec::ResolvedBackend(spec) == "nccl" && std::getenv("NCCL_ALGO") == nullptr) {
    options.nccl_algo = "Ring";
  }
  ASSIGN_OR_RETURN(std::unique_ptr<dist::ProcessGroup> group,
                   dist::CreateProcessGroup(spec::ResolvedBackend(spec), std::move(store), p.rank,
                                            p.world_size, options));
  return std::shared_ptr<dist::ProcessGroup>(std::move(group));
}

// Errors of the job itself, which the same spec on the same data would hit again.
bool IsJobError(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ||
         s.code() == StatusCode::kFailedPrecondition;
}

}  // namespace

int RunRank() {
  ::signal(SIGPIPE, SIG_IGN);
  StatusOr<Place> place = ReadPlace();
  if (!place.ok()) return Fail(std::string(place.status().message()), 2);
  StatusOr<spec::JobSpec> spec = ReadSpec(place->spec_path);
  if (!spec.ok()) return Fail(std::string(spec.status().message()), 2);
  spec->parallelism.world_size = place->world_size;
  if (spec->device == "cuda") {
    // This rank's GPU becomes its only visible device, cuda:0 (before anything starts CUDA).
    const std::string visible = VisibleDeviceFor(place->slot, std::getenv("CUDA_VISIBLE_DEVICES"));
    ::setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
  }
  Reporter reporter(place->report_fd);
  trainer::Progress progress;
  progress.Set(trainer::Phase::kStarting);
  ScopedStopSignals signals(OnSignal);

  std::shared_ptr<dist::ProcessGroup> group;
  std::atomic<bool> done{false};
  std::thread progress_thread;
  auto finish = [&](int code) {
    done = true;
    if (progress_thread.joinable()) progress_thread.join();
    return code;
  };
  // Reports start before the rendezvous, so a rank stuck there is seen too.
  progress_thread = std::thread([&] { ReportProgress(&reporter, &progress, nullptr, &done); });
  if (place->world_size > 1) {
    StatusOr<std::shared_ptr<dist::ProcessGroup>> joined = Join(*place, *spec);
    if (!joined.ok()) {
      return finish(Fail("rank " + std::to_string(place->rank) + ": joining the group: " +
                             std::string(joined.status().message()),
                         1));
    }
    group = *std::move(joined);
    done = true;
    progress_thread.join();
    done = false;
    progress_thread = std::thread([&] { ReportProgress(&reporter, &progress, group.get(), &done); });
  }

  trainer::TrainerOptions options;
  options.stop = &g_stop;
  options.process_group = group;
  options.progress = &progress;
  options.run_uid = Env(kJobUidEnv);
  options.job = Env(kJobEnv);
  options.on_step = [&](const trainer::StepMetrics& m) {
    reporter.Send(trainer::StepMetricsJson(m));
  };
  options.on_eval = [&](const trainer::EvalMetrics& m) {
    reporter.Send(trainer::EvalMetricsJson(m));
  };
  options.on_checkpoint = [&](const std::string& dir, int64_t step) {
    reporter.Send(Json::Object({{"type", "checkpoint"}, {"dir", dir}, {"step", step}}));
  };
  StatusOr<std::unique_ptr<trainer::Trainer>> t = trainer::Trainer::Create(*spec, options);
  if (!t.ok()) {
    return finish(Fail(std::string(t.status().message()), IsJobError(t.status()) ? 2 : 1));
  }
  if (!(*t)->resumed_from().empty()) {
    std::fprintf(stderr, "rank %d: resuming from %s at step %lld\n", place->rank,
                 (*t)->resumed_from().c_str(), static_cast<long long>((*t)->step()));
  }
  if (!(*t)->resume_note().empty() && place->rank == 0) {
    std::fprintf(stderr, "rank 0: note: %s\n", (*t)->resume_note().c_str());
  }
  StatusOr<trainer::TrainSummary> summary = (*t)->Run();
  if (!summary.ok()) return finish(Fail(std::string(summary.status().message()), 1));
  return finish(summary->interrupted ? 143 : 0);
}

}  // namespace trainyard::daemon
