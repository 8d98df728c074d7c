// Coordinator, the worker side: registration and reconciliation, heartbeats, metrics, and the
// periodic checks of Tick() (coordinator.h). Rank exits and hangs: coordinator_faults.cc.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "common/logging.h"
#include "server/coordinator.h"
#include "server/scheduler.h"

namespace trainyard::server {

using trainyard::v1::JobEvent;
using trainyard::v1::WorkerCommand;

namespace {

double SecondsOf(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

Status CheckWorkerName(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 63 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
      });
  if (ok) return OkStatus();
  return InvalidArgumentError("worker name \"" + name +
                              "\": must be 1 to 63 characters of A-Z, a-z, 0-9, '-', '.', '_'");
}

}  // namespace

StatusOr<trainyard::v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const trainyard::v1::RegisterWorkerRequest& req) {
  RETURN_IF_ERROR(CheckWorkerName(req.name()));
  if (req.cpu_slots() < 0 || req.cpu_slots() > 4096) {
    return InvalidArgumentError("cpu_slots = " + std::to_string(req.cpu_slots()) +
                                ": must be in [0, 4096]");
  }
  if (req.cpu_slots() == 0 && req.gpus_size() == 0) {
    return InvalidArgumentError("worker " + req.name() + " offers no CPU slot and no GPU");
  }
  std::lock_guard<std::mutex> lock(mu_);
  trainyard::v1::WorkerInfo info;
  info.set_name(req.name());
  info.set_host(req.host());
  info.set_cpu_slots(req.cpu_slots());
  *info.mutable_gpus() = req.gpus();
  info.set_metrics_address(req.metrics_address());
  info.set_memory_bytes(req.memory_bytes());
  registry_.Register(info);
  outbox_[req.name()].clear();
  commands_cv_.notify_all();  // an older stream of this worker ends
  TY_LOG(INFO) << "worker " << req.name() << " (" << req.host()
               << ") registered: " << req.cpu_slots() << " CPU slots, " << req.gpus_size()
               << " GPUs, " << req.ranks_size() << " ranks running";
  // Reconcile: the ranks the worker reports are the truth; a rank the coordinator placed there
  // that it does not report is gone (the daemon restarted, or never got the assignment).
  std::set<std::tuple<std::string, int, int>> reported;
  for (const auto& s : req.ranks()) reported.insert({s.job_id(), s.attempt(), s.rank()});
  for (const std::string& id : order_) {
    Entry& e = *jobs_[id];
    if (e.ranks.empty() || (!ActiveAttempt(e) && !e.stopping)) continue;
    const int attempt = e.job.attempts_size();
    for (auto& [rank, r] : e.ranks) {
      if (r.placement.worker() != req.name() || r.status.exited()) continue;
      if (reported.count({id, attempt, rank})) continue;
      if (e.job.state() == trainyard::v1::SCHEDULED && !r.reported) {
        // Never started: the assignment was lost with a stream; send it again.
        ResendAssignment(e, req.name());
        break;
      }
      // Exited before the abort: no worker will report its exit, and its slot is free.
      r.status.set_exited(true);
      if (ActiveAttempt(e)) {
        AbortAttempt(e, "worker " + req.name() + " (" + req.host() + ") came back without " +
                            RankName(r.placement) + " of attempt " + std::to_string(attempt));
      }
    }
  }
  for (const auto& s : req.ranks()) OnRankStatus(req.name(), s);
  trainyard::v1::RegisterWorkerResponse out;
  out.set_heartbeat_interval_ms(options_.heartbeat_interval.count());
  return out;
}

Status Coordinator::Heartbeat(const trainyard::v1::WorkerHeartbeat& hb) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!registry_.Heartbeat(hb.name(), hb.draining())) {
    return NotFoundError("worker " + hb.name() +
                         " is not registered (or was declared lost); "
                         "register again");
  }
  // A rank killed by a signal first: when it and the peers that lost it exit together, the
  // attempt's reason is its (an OOM kill), not a peer's "closed the connection".
  std::vector<const trainyard::v1::RankStatus*> order;
  for (const auto& s : hb.ranks()) order.push_back(&s);
  std::stable_partition(order.begin(), order.end(), [](const trainyard::v1::RankStatus* s) {
    return s->exited() && s->exit_code() > 128;
  });
  for (const trainyard::v1::RankStatus* s : order) OnRankStatus(hb.name(), *s);
  return OkStatus();
}

StatusOr<int64_t> Coordinator::Incarnation(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const WorkerRegistry::Entry* w = registry_.Find(name);
  if (w == nullptr || !w->alive) return NotFoundError("worker " + name + " is not registered");
  return w->incarnation;
}

StatusOr<std::vector<WorkerCommand>> Coordinator::TakeCommands(const std::string& name,
                                                               int64_t incarnation,
                                                               std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto current = [&] {
    const WorkerRegistry::Entry* w = registry_.Find(name);
    return w != nullptr && w->alive && w->incarnation == incarnation;
  };
  commands_cv_.wait_for(lock, timeout, [&] { return !current() || !outbox_[name].empty(); });
  if (!current()) {
    return AbortedError("worker " + name + " registered again or was declared lost");
  }
  std::vector<WorkerCommand> out(std::make_move_iterator(outbox_[name].begin()),
                                 std::make_move_iterator(outbox_[name].end()));
  outbox_[name].clear();
  return out;
}

void Coordinator::OnRankStatus(const std::string& worker, const trainyard::v1::RankStatus& s) {
  Entry* e = Find(s.job_id());
  auto stale = [&] {
    if (s.exited()) return;
    WorkerCommand c;
    c.mutable_abort()->set_job_id(s.job_id());
    c.mutable_abort()->set_attempt(s.attempt());
    c.mutable_abort()->set_reason("the attempt is over");
    Send(worker, std::move(c));
  };
  if (e == nullptr || s.attempt() != e->job.attempts_size()) return stale();
  auto it = e->ranks.find(s.rank());
  if (it == e->ranks.end() || it->second.placement.worker() != worker) return stale();
  RankRuntime& r = it->second;
  const bool was_exited = r.status.exited();
  r.status = s;
  r.reported = true;
  r.received = clock_->Now();
  if (!ActiveAttempt(*e)) {
    // Asked again each heartbeat while it runs: the abort may have been lost with a stream or
    // a re-registration, or the worker was away when the attempt ended.
    stale();
    return;
  }
  if (s.exited() && !was_exited) return OnRankExit(*e, r);
  if (e->job.cancel_requested() && !s.exited()) {
    // Asked again each heartbeat: a cancel may have been lost with a stream (the worker
    // ignores a repeat).
    WorkerCommand c;
    c.mutable_cancel()->set_job_id(s.job_id());
    c.mutable_cancel()->set_attempt(s.attempt());
    c.mutable_cancel()->set_checkpoint(e->job.cancel_checkpoint());
    c.mutable_cancel()->set_reason(CancelReason(e->job));
    Send(worker, std::move(c));
    return;
  }
  MaybeRunning(*e);
}

void Coordinator::MaybeRunning(Entry& e) {
  if (e.job.state() == trainyard::v1::SCHEDULED &&
      std::all_of(e.ranks.begin(), e.ranks.end(),
                  [](const auto& kv) { return kv.second.reported; })) {
    (void)Transition(e, trainyard::v1::RUNNING, "");
  }
}

Status Coordinator::ReportMetrics(const trainyard::v1::MetricsReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Find(report.job_id());
  if (e == nullptr || report.attempt() != e->job.attempts_size()) {
    return OkStatus();  // from an attempt that is over: dropped
  }
  // A report speaks for one rank (evaluations and checkpoints for rank 0), which must run on
  // the worker that sent it: a worker cannot report for another's ranks.
  const int rank = report.has_step() ? report.step().rank() : 0;
  auto it = e->ranks.find(rank);
  if (it == e->ranks.end()) return InvalidArgumentError("no rank " + std::to_string(rank));
  if (it->second.placement.worker() != report.worker()) {
    return PermissionDeniedError("rank " + std::to_string(rank) + " of job " + report.job_id() +
                                 " runs on worker " + it->second.placement.worker() + ", not on " +
                                 (report.worker().empty() ? "an unnamed worker" : report.worker()));
  }
  JobEvent event;
  if (report.has_step()) {
    if (!ActiveAttempt(*e)) return OkStatus();
    trainyard::v1::StepMetrics m = report.step();
    it->second.last_step = m;
    // A rank that reports a step has started, whatever its worker's next heartbeat says.
    if (!it->second.reported) {
      it->second.reported = true;
      it->second.received = clock_->Now();
      MaybeRunning(*e);
    }
    // backward_seconds already excludes the wait for gradient buckets (allreduce_wait).
    e->stragglers->AddStep(m.rank(), m.data_seconds() + m.forward_seconds() + m.backward_seconds() +
                                         m.optimizer_seconds());
    if (m.rank() != 0) return OkStatus();
    const auto now = clock_->Now();
    if (e->last_step_at != Clock::TimePoint{} && m.step() > e->job.last_step().step()) {
      const double per_step = SecondsOf(now - e->last_step_at) /
                              static_cast<double>(m.step() - e->job.last_step().step());
      e->step_seconds = e->step_seconds == 0 ? per_step : 0.9 * e->step_seconds + 0.1 * per_step;
    }
    e->last_step_at = now;
    m.set_eta_seconds(e->step_seconds * static_cast<double>(m.total_steps() - m.step()));
    m.set_memory_bytes(it->second.status.memory_bytes());  // from its worker's last heartbeat
    m.set_time_ms(NowMs());
    *e->job.mutable_last_step() = m;
    *event.mutable_step() = m;
    (void)Emit(*e, std::move(event));
    if (now - e->last_persist >= std::chrono::seconds(5)) (void)Commit(*e, nullptr);
    return OkStatus();
  }
  if (report.has_eval()) {
    *e->job.mutable_last_eval() = report.eval();
    *event.mutable_eval() = report.eval();
  } else if (report.has_checkpoint()) {
    e->job.set_checkpoint(report.checkpoint());
    event.set_checkpoint(report.checkpoint());
  } else {
    return InvalidArgumentError("empty metrics report");
  }
  return Emit(*e, std::move(event));
}

// ---- Tick ----

void Coordinator::CheckStopped(Entry& e) {
  if (!e.stopping) return;
  // A rank on a lost worker is gone; one on a worker not heard from since this coordinator
  // started may still run until that worker had the heartbeat timeout to come back.
  const bool settled = clock_->Now() - started_ >= options_.heartbeat_timeout;
  const bool done = std::all_of(e.ranks.begin(), e.ranks.end(), [&](const auto& kv) {
    const std::string& w = kv.second.placement.worker();
    return kv.second.status.exited() ||
           (!registry_.IsAlive(w) && (registry_.Find(w) != nullptr || settled));
  });
  if (!done && clock_->Now() < e.stop_deadline) return;
  e.stopping = false;
  if (!done) {
    TY_LOG(WARNING) << "job " << e.job.id() << ": ranks did not report their exit within "
                    << FormatSeconds(SecondsOf(options_.stop_timeout)) << "; freeing their slots";
  }
  if (e.job.cancel_requested() && !IsFinal(e.job.state())) {
    EndAttempt(e, CancelReason(e.job));
    (void)Transition(e, trainyard::v1::CANCELLED, CancelReason(e.job), e.job.cancelled_by());
  }
}

void Coordinator::CheckLiveness(Entry& e) {
  if (!ActiveAttempt(e)) return;
  const auto now = clock_->Now();
  for (const auto& [rank, r] : e.ranks) {
    if (r.status.exited()) continue;
    const std::string& worker = r.placement.worker();
    if (registry_.IsAlive(worker)) continue;
    const WorkerRegistry::Entry* w = registry_.Find(worker);
    if (w != nullptr) {
      return AbortAttempt(e, "worker " + worker + " (" + r.placement.host() +
                                 ") lost: no heartbeat for " +
                                 FormatSeconds(SecondsOf(now - w->last_heartbeat)));
    }
    if (now - started_ >= options_.heartbeat_timeout) {
      return AbortAttempt(e, "worker " + worker + " (" + r.placement.host() +
                                 ") did not re-register within " +
                                 FormatSeconds(SecondsOf(options_.heartbeat_timeout)) +
                                 " of the coordinator's restart");
    }
  }
  if (e.job.state() == trainyard::v1::SCHEDULED &&
      now - e.attempt_started >= options_.start_timeout) {
    std::string missing;
    for (const auto& [rank, r] : e.ranks) {
      if (!r.reported) missing += (missing.empty() ? "" : ", ") + RankName(r.placement);
    }
    AbortAttempt(
        e, missing + " did not start within " + FormatSeconds(SecondsOf(options_.start_timeout)));
  }
}

void Coordinator::CheckStragglers(Entry& e) {
  if (e.job.state() != trainyard::v1::RUNNING) return;
  for (const StragglerDetector::Change& c : e.stragglers->Update()) {
    const RankRuntime& r = e.ranks[c.rank];
    trainyard::v1::Diagnosis d;
    d.set_kind(c.flagged ? trainyard::v1::Diagnosis::STRAGGLER
                         : trainyard::v1::Diagnosis::STRAGGLER_CLEARED);
    d.set_attempt(e.job.attempts_size());
    d.set_rank(c.rank);
    d.set_worker(r.placement.worker());
    d.set_host(r.placement.host());
    d.set_step(r.last_step.step());
    d.set_seconds(c.mean_seconds);
    d.set_time_ms(NowMs());
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "%.1fx", c.mean_seconds / c.median_seconds);
    d.set_message(RankName(r.placement) + (c.flagged ? " is a straggler: " : " caught up: ") +
                  FormatSeconds(c.mean_seconds) + " of compute per step over the last " +
                  std::to_string(e.spec.fault_tolerance.straggler_window_steps) + " steps, " +
                  ratio + " the other ranks' median of " + FormatSeconds(c.median_seconds));
    if (e.job.diagnoses_size() >= 100) e.job.mutable_diagnoses()->DeleteSubrange(0, 1);
    *e.job.add_diagnoses() = d;
    JobEvent event;
    *event.mutable_diagnosis() = std::move(d);
    (void)Emit(e, std::move(event));
  }
  e.job.clear_stragglers();
  for (int rank : e.stragglers->Flagged()) e.job.add_stragglers(rank);
}

std::vector<WorkerCapacity> Coordinator::FreeCapacity(bool gpu) const {
  std::map<std::string, std::set<int>> used;
  std::map<std::string, int64_t> memory;  // estimates of the CPU ranks placed there
  for (const auto& [id, e] : jobs_) {
    if ((!ActiveAttempt(*e) && !e->stopping) || (e->spec.device == "cuda") != gpu) continue;
    const int64_t rank_memory = gpu ? 0 : e->gang.rank_memory_bytes;
    for (const auto& [rank, r] : e->ranks) {
      if (r.status.exited()) continue;
      used[r.placement.worker()].insert(r.placement.slot());
      memory[r.placement.worker()] += rank_memory;
    }
  }
  std::vector<WorkerCapacity> out;
  for (const WorkerRegistry::Entry* w : registry_.Alive()) {
    if (w->draining) continue;
    WorkerCapacity c = CapacityOf(w->info, gpu);
    c.free_slots.clear();
    for (int s = 0; s < c.total_slots; ++s) {
      if (used[c.name].count(s) == 0) c.free_slots.push_back(s);
    }
    c.memory_in_use_bytes = memory[c.name];
    out.push_back(std::move(c));
  }
  return out;
}

void Coordinator::Schedule() {
  std::vector<Entry*> queue;
  for (const std::string& id : order_) {
    Entry* e = jobs_[id].get();
    const auto s = e->job.state();
    if (s == trainyard::v1::PENDING || (s == trainyard::v1::RESTARTING && !e->stopping)) {
      queue.push_back(e);
    }
  }
  std::stable_sort(queue.begin(), queue.end(), [](const Entry* a, const Entry* b) {
    return a->job.priority() > b->job.priority();
  });
  for (const bool gpu : {false, true}) {
    std::vector<GangRequest> requests;
    for (const Entry* e : queue) {
      if ((e->spec.device == "cuda") != gpu) continue;
      requests.push_back(e->gang);
    }
    if (requests.empty()) continue;
    std::vector<WorkerCapacity> free = FreeCapacity(gpu);
    for (Placement& p : server::Schedule(requests, &free))
      StartAttempt(*jobs_[p.job_id], std::move(p.ranks));
  }
}

void Coordinator::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : registry_.Expire()) {
    TY_LOG(WARNING) << "worker " << name << " lost: no heartbeat for "
                    << FormatSeconds(SecondsOf(options_.heartbeat_timeout));
    commands_cv_.notify_all();
  }
  for (const std::string& id : order_) {
    Entry& e = *jobs_[id];
    if (IsFinal(e.job.state()) && !e.stopping) continue;
    CheckLiveness(e);
    CheckHang(e);
    CheckStragglers(e);
    CheckStopped(e);
  }
  Schedule();
}

Coordinator::Snapshot Coordinator::GetSnapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  const int64_t hour_ago = NowMs() - 3600 * 1000;
  for (const std::string& id : order_) {
    const Entry& e = *jobs_[id];
    const auto state = e.job.state();
    ++s.jobs_by_state[state];
    if (state == trainyard::v1::PENDING || state == trainyard::v1::RESTARTING) ++s.queue_length;
    if (IsFinal(state) && e.job.updated_ms() < hour_ago) continue;
    JobGauges g;
    g.id = id;
    g.state = state;
    g.last_step = e.job.last_step();
    g.restarts = e.job.restarts();
    const int attempt = e.job.attempts_size();
    for (const auto& d : e.job.diagnoses()) {
      if (d.kind() == trainyard::v1::Diagnosis::HANG && d.attempt() == attempt) g.hung = true;
    }
    // Flags describe the ranks running now; those of an attempt that ended (a job restarting
    // or over) would keep the straggler alert firing.
    g.stragglers = state == trainyard::v1::RUNNING ? e.job.stragglers_size() : 0;
    s.jobs.push_back(std::move(g));
  }
  s.workers_known = static_cast<int>(registry_.all().size());
  s.workers_alive = static_cast<int>(registry_.Alive().size());
  return s;
}

}  // namespace trainyard::server
