// Coordinator, an attempt's life: starting its ranks (and resending the assignment to a worker
// that reconnects), following their statuses and metrics to RUNNING, stopping them, freeing
// their slots, and scheduling queued jobs onto free capacity (coordinator.h). How an attempt
// fails: coordinator_faults.cc.
#include <algorithm>
#include <cmath>
#include <set>

#include "common/logging.h"
#include "common/random_id.h"
#include "server/coordinator.h"
#include "server/scheduler.h"

namespace trainyard::server {

using trainyard::v1::JobEvent;
using trainyard::v1::WorkerCommand;

bool Coordinator::ActiveAttempt(const Entry& e) const {
  return e.job.state() == trainyard::v1::SCHEDULED || e.job.state() == trainyard::v1::RUNNING;
}

trainyard::v1::Attempt& Coordinator::BeginAttempt(Entry& e,
                                                  std::vector<trainyard::v1::RankPlacement> ranks) {
  trainyard::v1::Attempt* a = e.job.add_attempts();
  a->set_number(e.job.attempts_size());
  a->set_started_ms(NowMs());
  a->set_secret(RandomHex(32));
  e.ranks.clear();
  for (auto& p : ranks) {
    e.ranks[p.rank()].placement = p;
    *a->add_ranks() = std::move(p);
  }
  e.job.set_current_world_size(a->ranks_size());
  e.attempt_started = clock_->Now();
  e.stopping = false;
  e.stepped = false;
  e.regroup_deadline = {};
  e.job.clear_stragglers();
  e.stragglers =
      std::make_unique<StragglerDetector>(a->ranks_size(), e.spec.fault_tolerance.straggler_factor,
                                          e.spec.fault_tolerance.straggler_window_steps);
  e.slow_links = SlowLinkDetector(e.spec.fault_tolerance.straggler_factor);
  rendezvous_.Open({e.job.id(), a->number(), a->secret()});
  return *a;
}

void Coordinator::StartAttempt(Entry& e, std::vector<trainyard::v1::RankPlacement> ranks) {
  const trainyard::v1::Attempt& a = BeginAttempt(e, std::move(ranks));
  std::set<std::string> workers;
  for (const auto& p : a.ranks()) workers.insert(p.worker());
  // Committed before any worker hears of it: a restarted coordinator knows every attempt that
  // may have ranks.
  (void)Transition(e, trainyard::v1::SCHEDULED,
                   "attempt " + std::to_string(a.number()) + " on " +
                       std::to_string(workers.size()) + " worker" +
                       (workers.size() == 1 ? "" : "s"));
  for (const std::string& worker : workers) ResendAssignment(e, worker);
}

void Coordinator::ResendAssignment(Entry& e, const std::string& worker) {
  const trainyard::v1::Attempt& a = e.job.attempts(e.job.attempts_size() - 1);
  WorkerCommand c;
  trainyard::v1::Assignment& as = *c.mutable_assign();
  as.set_job_id(e.job.id());
  as.set_job_uid(e.job.uid());
  as.set_attempt(a.number());
  as.set_secret(a.secret());
  as.set_spec_json(e.job.spec_json());
  as.set_world_size(a.ranks_size());  // an elastic job's actual size; else world_size
  for (const auto& p : a.ranks()) {
    if (p.worker() == worker) *as.add_ranks() = p;
  }
  Send(worker, std::move(c));
}

void Coordinator::StopRanks(Entry& e, bool checkpoint, const std::string& reason, bool cancel) {
  const trainyard::v1::Attempt& a = e.job.attempts(e.job.attempts_size() - 1);
  std::map<std::string, bool> workers;
  for (const auto& [rank, r] : e.ranks) {
    if (!r.status.exited()) workers[r.placement.worker()] = true;
  }
  for (const auto& [worker, unused] : workers) {
    WorkerCommand c;
    trainyard::v1::StopRanks* stop = cancel ? c.mutable_cancel() : c.mutable_abort();
    stop->set_job_id(e.job.id());
    stop->set_attempt(a.number());
    stop->set_checkpoint(checkpoint);
    stop->set_reason(reason);
    Send(worker, std::move(c));
  }
  e.stopping = true;
  e.stop_deadline = clock_->Now() + options_.stop_timeout;
}

void Coordinator::OnRankStatus(const std::string& worker, const trainyard::v1::RankStatus& s) {
  Entry* e = Find(s.job_id());
  auto stale = [&] {
    if (!s.exited()) Send(worker, AbortCommand(s.job_id(), s.attempt(), "the attempt is over"));
  };
  if (e == nullptr || s.attempt() != e->job.attempts_size()) return stale();
  auto it = e->ranks.find(s.rank());
  if (it == e->ranks.end() || it->second.placement.worker() != worker) return stale();
  RankRuntime& r = it->second;
  const bool was_exited = r.status.exited();
  r.status = s;
  r.reported = true;
  r.received = clock_->Now();
  AddLinks(*e, r);
  if (!ActiveAttempt(*e)) {
    // Asked again each heartbeat while it runs: the abort may have been lost with a stream or
    // a re-registration, or the worker was away when the attempt ended.
    stale();
    return;
  }
  if (s.exited() && !was_exited) return OnRankExit(*e, r);
  if (s.regrouping() && !s.exited()) OnRegroupingReport(*e);
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
  if (e == nullptr) {
    return NotFoundError("metrics report of job " + report.job_id() + ": no such job");
  }
  if (report.attempt() != e->job.attempts_size()) {
    const int late = LateStepOfRegroup(*e, report);  // the rank's number now
    if (late < 0) return RefuseStaleReport(*e, report);
    trainyard::v1::StepMetrics m = report.step();
    m.set_rank(late);
    return late == 0 ? OnStepReport(*e, e->ranks[0], m, /*late=*/true) : OkStatus();
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
  if (report.has_step()) return OnStepReport(*e, it->second, report.step());
  JobEvent event;
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

WorkerCommand AbortCommand(const std::string& job_id, int attempt, const std::string& reason) {
  WorkerCommand c;
  c.mutable_abort()->set_job_id(job_id);
  c.mutable_abort()->set_attempt(attempt);
  c.mutable_abort()->set_reason(reason);
  return c;
}

void AddRefusal(trainyard::v1::ReportMetricsResponse* response, const Status& refused) {
  const std::string why(refused.message());
  const auto& seen = response->refused();
  if (seen.size() >= 16 || std::find(seen.begin(), seen.end(), why) != seen.end()) return;
  response->add_refused(why);
}

Status Coordinator::RefuseStaleReport(Entry& e, const trainyard::v1::MetricsReport& report) {
  ++stale_reports_;
  const int current = e.job.attempts_size();
  const std::string attempt = "attempt " + std::to_string(report.attempt());
  const std::string why = "metrics report of job " + e.job.id() + " " + attempt +
                          " refused: " + attempt +
                          (report.attempt() < current ? " is over" : " never started") +
                          "; the job is at attempt " + std::to_string(current);
  if (e.stale_attempts_logged.insert(report.attempt()).second) {
    TY_LOG(WARNING) << why << " (from worker " << (report.worker().empty() ? "?" : report.worker())
                    << "; logged once per attempt, counted in trainyard_stale_reports_total)";
    // Its ranks still run there: the worker stops them (as for a heartbeat naming them).
    if (!report.worker().empty()) {
      Send(report.worker(), AbortCommand(e.job.id(), report.attempt(), attempt + " is over"));
    }
  }
  return FailedPreconditionError(why);
}

Status Coordinator::OnStepReport(Entry& e, RankRuntime& r, const trainyard::v1::StepMetrics& step,
                                 bool late) {
  if (!ActiveAttempt(e)) return OkStatus();
  trainyard::v1::StepMetrics m = step;
  if (!late) {
    r.last_step = m;
    e.stepped = true;
    // A rank that reports a step has started, whatever its worker's next heartbeat says.
    if (!r.reported) {
      r.reported = true;
      r.received = clock_->Now();
      MaybeRunning(e);
    }
    // backward_seconds already excludes the wait for gradient buckets (allreduce_wait).
    e.stragglers->AddStep(m.rank(), m.data_seconds() + m.forward_seconds() + m.backward_seconds() +
                                        m.optimizer_seconds());
  }
  if (m.rank() != 0) return OkStatus();
  const auto now = clock_->Now();
  if (e.last_step_at != Clock::TimePoint{} && m.step() > e.job.last_step().step()) {
    const double per_step =
        SecondsOf(now - e.last_step_at) / static_cast<double>(m.step() - e.job.last_step().step());
    e.step_seconds = e.step_seconds == 0 ? per_step : 0.9 * e.step_seconds + 0.1 * per_step;
  }
  e.last_step_at = now;
  m.set_eta_seconds(e.step_seconds * static_cast<double>(m.total_steps() - m.step()));
  m.set_memory_bytes(r.status.memory_bytes());  // from its worker's last heartbeat
  m.set_time_ms(NowMs());
  *e.job.mutable_last_step() = m;
  JobEvent event;
  *event.mutable_step() = m;
  (void)Emit(e, std::move(event));
  if (now - e.last_persist >= std::chrono::seconds(5)) (void)Commit(e, nullptr);
  return OkStatus();
}

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

}  // namespace trainyard::server
