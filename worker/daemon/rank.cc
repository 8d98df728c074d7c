#include "worker/daemon/rank.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "common/signals.h"
#include "proto/rpc.h"
#include "worker/daemon/flight_report.h"
#include "worker/daemon/gpus.h"
#include "worker/daemon/grpc_store.h"
#include "worker/daemon/rank_regroup.h"
#include "worker/dist/process_group.h"
#include "worker/ranks/env.h"
#include "worker/ranks/group.h"
#include "worker/ranks/links.h"
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

Json LinksJson(const std::vector<ranks::PeerLink>& links) {
  std::vector<Json> out;
  for (const ranks::PeerLink& l : links) {
    out.push_back(Json::Object({{"peer", l.peer}, {"rtt_us", l.rtt_us}}));
  }
  return Json::Array(std::move(out));
}

// Every half second: phase, step and collective progress (Note [Naming a hung rank] in
// server/health.h), and for an elastic job whether the rank left its group (rank_regroup.h).
// Runs until `done`; `current` says which group to watch at each report.
void ReportProgress(Reporter* reporter, const trainer::Progress* progress, const RankGroup* current,
                    const std::atomic<bool>* done) {
  int64_t last_done = -1;
  const dist::ProcessGroup* last_group = nullptr;
  auto done_changed = SteadyClock::now();
  ranks::LinkMonitor links;
  while (!done->load()) {
    const auto now = SteadyClock::now();
    std::string why;
    const bool regrouping = current->regrouping(&why);
    // Between groups a rank waits in no collective (Note [Naming a hung rank]).
    const std::shared_ptr<dist::ProcessGroup> group = regrouping ? nullptr : current->group();
    const int64_t issued = group ? group->collectives_issued() : 0;
    const int64_t finished = group ? group->collectives_done() : 0;
    if (finished != last_done || group.get() != last_group) {
      last_done = finished;
      last_group = group.get();
      done_changed = now;
    }
    const int64_t now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    Json line = Json::Object(
        {{"type", "status"},
         {"step", progress->step.load()},
         {"phase", trainer::PhaseName(static_cast<trainer::Phase>(progress->phase.load()))},
         {"phase_age_ms", (now_ns - progress->phase_since_ns.load()) / 1000000},
         {"issued", issued},
         {"done", finished},
         {"collective_age_ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - done_changed).count()},
         {"links", LinksJson(group ? links.Sample() : std::vector<ranks::PeerLink>{})},
         {"attempt", static_cast<int64_t>(current->group_attempt())},
         {"regrouping", regrouping},
         {"group_error", why}});
    AddFlightRecords(group.get(), now, &line);  // only while a collective is stuck or failed
    reporter->Send(line);
    for (int i = 0; i < 10 && !done->load(); ++i) std::this_thread::sleep_for(50ms);
  }
}

struct Place {
  std::string coordinator, job_id, secret, spec_path, host;
  int attempt = 0, rank = 0, world_size = 1, report_fd = -1, slot = 0, command_fd = -1;
};

constexpr const char* kByHand = " (trainyard-worker sets it; a rank is not run by hand)";

StatusOr<int> IntEnv(const char* name, int lo, int hi) {
  return ranks::IntEnv(name, lo, hi, kByHand, kByHand);
}

StatusOr<Place> ReadPlace() {
  Place p;
  p.coordinator = Env(ranks::kCoordinatorEnv);
  p.job_id = Env(ranks::kJobEnv);
  p.secret = Env(ranks::kSecretEnv);
  p.spec_path = Env(ranks::kSpecEnv);
  p.host = Env(ranks::kHostEnv);
  for (const auto& [name, value] :
       {std::pair{ranks::kCoordinatorEnv, &p.coordinator}, std::pair{ranks::kJobEnv, &p.job_id},
        std::pair{ranks::kSpecEnv, &p.spec_path}}) {
    if (value->empty()) {
      return InvalidArgumentError(std::string(name) + " is not set" + kByHand);
    }
  }
  ASSIGN_OR_RETURN(p.attempt, IntEnv(ranks::kAttemptEnv, 1, 1 << 30));
  ASSIGN_OR_RETURN(p.world_size, IntEnv(ranks::kWorldSizeEnv, 1, spec::kMaxWorldSize));
  ASSIGN_OR_RETURN(p.rank, IntEnv(ranks::kRankEnv, 0, p.world_size - 1));
  ASSIGN_OR_RETURN(p.report_fd, IntEnv(ranks::kReportFdEnv, -1, 1 << 20));
  if (!Env(ranks::kCommandFdEnv).empty()) {
    ASSIGN_OR_RETURN(p.command_fd, IntEnv(ranks::kCommandFdEnv, -1, 1 << 20));
  }
  if (!Env(ranks::kSlotEnv).empty()) {
    ASSIGN_OR_RETURN(p.slot, IntEnv(ranks::kSlotEnv, 0, 4095));
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

StatusOr<std::shared_ptr<dist::ProcessGroup>> Join(const Place& p, const spec::JobSpec& spec,
                                                   dist::PipelineGroups* pipeline = nullptr) {
  rpc::ChannelOptions co;
  co.tls = {Env(ranks::kCaEnv), Env(ranks::kCertEnv), Env(ranks::kKeyEnv)};
  co.plaintext_remote = true;  // the daemon already applied the policy to this address
  co.tls_server_name = Env(ranks::kServerNameEnv);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, rpc::MakeChannel(p.coordinator, co));
  std::shared_ptr<dist::Store> store =
      NewGrpcStore(channel, {p.job_id, p.attempt, p.secret}, Env(ranks::kTokenEnv));
  return ranks::JoinGroup(spec, std::move(store), p.rank, p.world_size, p.host, pipeline);
}

// Errors of the job itself, which the same spec on the same data would hit again.
bool IsJobError(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ||
         s.code() == StatusCode::kFailedPrecondition;
}

// A join of an elastic rank's group, on a thread of its own (JoinUnlessSuperseded).
struct PendingJoin {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  StatusOr<std::shared_ptr<dist::ProcessGroup>> result = UnavailableError("not joined yet");
};

// Joins p's group, unless a regroup to a later attempt arrives first (a member was lost while
// the group formed: the join may wait for it until its timeout): then Aborted, and the join
// goes on alone on its thread, which drops what it gets.
StatusOr<std::shared_ptr<dist::ProcessGroup>> JoinUnlessSuperseded(const RankGroup& current,
                                                                   const Place& p,
                                                                   const spec::JobSpec& spec) {
  auto join = std::make_shared<PendingJoin>();
  std::thread([join, p, spec] {
    StatusOr<std::shared_ptr<dist::ProcessGroup>> group = Join(p, spec);
    std::lock_guard<std::mutex> lock(join->mu);
    join->result = std::move(group);
    join->done = true;
    join->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(join->mu);
  while (!join->cv.wait_for(lock, 100ms, [&] { return join->done; })) {
    if (current.Superseded(p.attempt)) {
      return AbortedError("a later regroup superseded it while it formed");
    }
  }
  return std::move(join->result);
}

// Elastic jobs (rank_regroup.h): joins the group of `next`. When that fails (a later regroup
// superseded it: a member was lost while the group formed; or it timed out), reports
// `regrouping` from that attempt's group, waits for the coordinator's later regroup and joins
// that one instead, 8 tries at most.
StatusOr<GroupPlace> JoinFrom(RankGroup& current, const Place& place, const spec::JobSpec& spec,
                              GroupPlace next) {
  for (int tries = 1;; ++tries) {
    Place p = place;
    p.attempt = next.attempt;
    p.secret = next.secret;
    p.rank = next.rank;
    p.world_size = next.world_size;
    StatusOr<std::shared_ptr<dist::ProcessGroup>> joined = JoinUnlessSuperseded(current, p, spec);
    if (joined.ok()) {
      current.Joined(next, *std::move(joined));
      return next;
    }
    const Status failed(joined.status().code(), "rank " + std::to_string(p.rank) +
                                                    ": joining the group of attempt " +
                                                    std::to_string(p.attempt) + ": " +
                                                    std::string(joined.status().message()));
    if (tries == 8) return failed;
    std::fprintf(stderr, "%s; waiting for the next regroup\n",
                 std::string(failed.message()).c_str());
    ASSIGN_OR_RETURN(next, current.Leave(failed, next.attempt));
  }
}

// TrainerOptions::regroup: leaves the group, waits for the daemon's regroup and joins it.
StatusOr<trainer::TrainerOptions::NextGroup> Regroup(RankGroup& current, const Place& place,
                                                     const spec::JobSpec& spec, const Status& why) {
  ASSIGN_OR_RETURN(GroupPlace next, current.Leave(why));
  ASSIGN_OR_RETURN(GroupPlace joined, JoinFrom(current, place, spec, std::move(next)));
  return trainer::TrainerOptions::NextGroup{current.group(), joined.attempt};
}

// The rank's first group, then in `current` (none for a one-rank job that is not elastic).
// `pipeline`: this rank's pipeline groups, for a pipeline-parallel job (never elastic).
Status JoinFirst(RankGroup& current, const Place& place, const spec::JobSpec& spec, bool elastic,
                 dist::PipelineGroups* pipeline) {
  if (elastic) {
    // A regroup may supersede the first group while it forms: JoinFrom follows it.
    return JoinFrom(current, place, spec, current.place()).status();
  }
  if (place.world_size == 1) return OkStatus();
  StatusOr<std::shared_ptr<dist::ProcessGroup>> joined = Join(place, spec, pipeline);
  if (!joined.ok()) {
    return Status(joined.status().code(),
                  "rank " + std::to_string(place.rank) +
                      ": joining the group: " + std::string(joined.status().message()));
  }
  current.SetGroup(*std::move(joined));
  return OkStatus();
}

}  // namespace

int RunRank() {
  ::signal(SIGPIPE, SIG_IGN);
  StatusOr<Place> place = ReadPlace();
  if (!place.ok()) return Fail(std::string(place.status().message()), 2);
  StatusOr<spec::JobSpec> spec = ReadSpec(place->spec_path);
  if (!spec.ok()) return Fail(std::string(spec.status().message()), 2);
  // An elastic job's world_size is the nominal one that sets the global batch; its group's
  // size is the actual one.
  const bool elastic = spec::IsElastic(spec->parallelism);
  if (!elastic) spec->parallelism.world_size = place->world_size;
  if (spec->device == "cuda") {
    // This rank's GPU becomes its only visible device, cuda:0 (before anything starts CUDA).
    const std::string visible = VisibleDeviceFor(place->slot, std::getenv("CUDA_VISIBLE_DEVICES"));
    ::setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
  }
  Reporter reporter(place->report_fd);
  trainer::Progress progress;
  progress.Set(trainer::Phase::kStarting);
  ScopedStopSignals signals(OnSignal);

  // How long a rank that left its group waits for the coordinator's regroup.
  const auto regroup_wait = std::chrono::milliseconds(static_cast<int64_t>(
      1000 * std::max(60.0, 2 * spec->parallelism.collective_timeout_seconds)));
  RankGroup current({place->attempt, place->secret, place->rank, place->world_size},
                    elastic ? place->command_fd : -1, regroup_wait);
  std::atomic<bool> done{false};
  // Reports start before the rendezvous, so a rank stuck there is seen too.
  std::thread progress_thread([&] { ReportProgress(&reporter, &progress, &current, &done); });
  auto finish = [&](int code) {
    done = true;
    if (progress_thread.joinable()) progress_thread.join();
    return code;
  };
  dist::PipelineGroups pipeline;
  const Status joined = JoinFirst(current, *place, *spec, elastic, &pipeline);
  if (!joined.ok()) return finish(Fail(std::string(joined.message()), 1));
  // Flight records carry the phase (flight_report.h), in every group the rank joins.
  if (current.group()) RecordPhases(*current.group(), progress);

  trainer::TrainerOptions options;
  options.stop = &g_stop;
  options.process_group = current.group();  // null: one rank, no group
  options.pipeline = std::move(pipeline);
  options.progress = &progress;
  options.run_uid = Env(ranks::kJobUidEnv);
  options.job = Env(ranks::kJobEnv);
  options.attempt = current.place().attempt;  // the checkpoint fence's epoch
  if (elastic) {
    options.regroup_requested = current.requested();
    options.regroup = [&](const Status& why) -> StatusOr<trainer::TrainerOptions::NextGroup> {
      ASSIGN_OR_RETURN(trainer::TrainerOptions::NextGroup next,
                       Regroup(current, *place, *spec, why));
      RecordPhases(*next.group, progress);
      return next;
    };
  }
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
