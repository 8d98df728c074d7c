// Coordinator, how an attempt ends: rank exits (all 0 at the last step: success; non-zero, or
// 0 before the last step: a failure), hangs (Note [Naming a hung rank], Note [A job that makes
// no progress] in health.h), stragglers, and the choice between a restart and failing the job: no
// restarts left, a rank that rejected the job, or the same failure at the same step in two attempts
// in a row.
#include <algorithm>
#include <chrono>
#include <set>

#include "common/logging.h"
#include "server/coordinator.h"

namespace trainyard::server {

using trainyard::v1::JobEvent;

namespace {

int64_t MsOf(std::chrono::nanoseconds d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// The last step a rank reported, in its status (its worker's heartbeat) or its step metrics.
int64_t LastStep(const trainyard::v1::RankStatus& s, const trainyard::v1::StepMetrics& m) {
  return std::max(s.step(), m.step());
}

// The run's length as the rank knows it; 0: unknown.
int64_t TotalSteps(const trainyard::v1::RankStatus& s, const trainyard::v1::StepMetrics& m) {
  return std::max(s.total_steps(), m.total_steps());
}

// Why a rank exited with `code` (not 0), with the last lines it wrote to stderr.
std::string ExitReason(const trainyard::v1::RankPlacement& p, const trainyard::v1::RankStatus& s) {
  const int code = s.exit_code();
  std::string reason = RankName(p) + " exited with code " + std::to_string(code);
  if (code == 143) {
    reason = RankName(p) + " stopped on SIGTERM (its worker is stopping?)";
  } else if (code > 128) {
    reason = RankName(p) + " was killed by signal " + std::to_string(code - 128);
  }
  if (!s.error().empty()) reason += ": " + s.error();
  return reason;
}

}  // namespace

void Coordinator::EndAttempt(Entry& e, const std::string& reason) {
  trainyard::v1::Attempt* a = e.job.mutable_attempts(e.job.attempts_size() - 1);
  if (a->ended_ms() == 0) {
    a->set_ended_ms(NowMs());
    a->set_end_reason(reason);
    rendezvous_.Close(e.job.id(), a->number());
  }
}

void Coordinator::AbortAttempt(Entry& e, const std::string& reason, bool restartable) {
  EndAttempt(e, reason);
  StopRanks(e, /*checkpoint=*/false, reason, /*cancel=*/false);
  if (e.job.cancel_requested()) {
    (void)Transition(e, trainyard::v1::CANCELLED, CancelReason(e.job) + "; " + reason,
                     e.job.cancelled_by());
  } else if (restartable && e.job.restarts() < e.job.max_restarts()) {
    e.job.set_restarts(e.job.restarts() + 1);
    (void)Transition(e, trainyard::v1::RESTARTING,
                     reason + "; restart " + std::to_string(e.job.restarts()) + " of " +
                         std::to_string(e.job.max_restarts()) + " from the latest checkpoint");
  } else {
    (void)Transition(e, trainyard::v1::FAILED,
                     restartable ? reason + "; no restarts left (fault_tolerance.max_restarts = " +
                                       std::to_string(e.job.max_restarts()) + ")"
                                 : reason);
  }
}

void Coordinator::OnRankExit(Entry& e, RankRuntime& r) {
  const int code = r.status.exit_code();
  const int64_t step = LastStep(r.status, r.last_step);
  if (code != 0) {
    if (e.job.cancel_requested()) return;  // stopping as asked; CheckStopped ends it
    // Exit code 2: the rank rejected the job itself (a bad spec, missing data): no restart helps.
    const std::string reason = ExitReason(r.placement, r.status);
    if (code != 2 && RegroupWithout(e, r.placement.rank(), reason)) return;
    return FailAttempt(e, {reason, code, step, code != 2});
  }
  // A rank that exits 0 before the job's last step did not finish it. Ranks asked to stop (a
  // cancel) may stop anywhere; those of an attempt that is over never get here (OnRankStatus).
  auto early = [](const RankRuntime& x) {
    const int64_t total = TotalSteps(x.status, x.last_step);
    return total > 0 && LastStep(x.status, x.last_step) < total;
  };
  const bool asked_to_stop = e.stopping || e.job.cancel_requested();
  if (early(r) && !asked_to_stop) {
    const std::string reason = RankName(r.placement) + " exited 0 at step " + std::to_string(step) +
                               " of " + std::to_string(TotalSteps(r.status, r.last_step)) +
                               ": before the last step";
    if (RegroupWithout(e, r.placement.rank(), reason)) return;
    return FailAttempt(e, {reason, 0, step, true});
  }
  const bool all_done = std::all_of(e.ranks.begin(), e.ranks.end(), [&](const auto& kv) {
    return kv.second.status.exited() && kv.second.status.exit_code() == 0 && !early(kv.second);
  });
  // Ranks that stopped early as asked leave the job to CheckStopped (CANCELLED).
  if (!all_done) return;
  EndAttempt(e, "");
  e.stopping = false;
  (void)Transition(e, trainyard::v1::SUCCEEDED, "");
}

void Coordinator::FailAttempt(Entry& e, const RankFailure& f) {
  trainyard::v1::Attempt& a = *e.job.mutable_attempts(e.job.attempts_size() - 1);
  a.set_failed_exit_code(f.exit_code);
  a.set_failed_step(f.step);
  if (f.restartable && f.step > 0 && e.job.attempts_size() >= 2 && !e.job.cancel_requested()) {
    const trainyard::v1::Attempt& previous = e.job.attempts(e.job.attempts_size() - 2);
    if (previous.failed_step() == f.step && previous.failed_exit_code() == f.exit_code) {
      return AbortAttempt(e,
                          f.reason + "; the same failure repeated at step " +
                              std::to_string(f.step) + " in attempts " +
                              std::to_string(previous.number()) + " and " +
                              std::to_string(a.number()) +
                              ": it is deterministic, so the job is not restarted again (fix "
                              "the cause, then submit it again)",
                          /*restartable=*/false);
    }
  }
  AbortAttempt(e, f.reason, f.restartable);
}

void Coordinator::CheckHang(Entry& e) {
  if (e.job.state() != trainyard::v1::RUNNING) return;
  const auto now = clock_->Now();
  std::vector<RankView> views;
  for (const auto& [rank, r] : e.ranks) {
    RankView v{r.placement, r.status, r.reported};
    const int64_t since = MsOf(now - r.received);
    v.status.set_report_age_ms(r.status.report_age_ms() + since);
    v.status.set_phase_age_ms(r.status.phase_age_ms() + since);
    v.status.set_collective_age_ms(r.status.collective_age_ms() + since);
    views.push_back(std::move(v));
  }
  std::optional<trainyard::v1::Diagnosis> d =
      FindHang(views, e.spec.fault_tolerance.hang_timeout_seconds);
  CheckCollectives(e, views, d.has_value());
  if (!d) return;
  d->set_attempt(e.job.attempts_size());
  d->set_time_ms(NowMs());
  TY_LOG(WARNING) << "job " << e.job.id() << ": " << d->message();
  if (e.job.diagnoses_size() >= 100) e.job.mutable_diagnoses()->DeleteSubrange(0, 1);
  *e.job.add_diagnoses() = *d;
  JobEvent event;
  *event.mutable_diagnosis() = *d;
  (void)Emit(e, std::move(event));
  if (RegroupWithout(e, d->rank(), d->message())) return;  // an elastic job: the others go on
  FailAttempt(e, {d->message(), /*exit_code=*/0, d->step(), /*restartable=*/true});
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
  for (const SlowLinkDetector::Change& c : e.slow_links.Update(clock_->Now())) EmitSlowLink(e, c);
  std::set<int> flagged;
  for (int rank : e.stragglers->Flagged()) flagged.insert(rank);
  for (const std::string& host : e.slow_links.Flagged()) {
    for (const auto& [rank, r] : e.ranks) {
      if (r.placement.host() == host) flagged.insert(rank);
    }
  }
  e.job.clear_stragglers();
  for (int rank : flagged) e.job.add_stragglers(rank);
}

void Coordinator::AddLinks(Entry& e, const RankRuntime& r) {
  for (const trainyard::v1::PeerLink& l : r.status.links()) {
    if (l.peer() == r.placement.host()) continue;
    const bool of_job = std::any_of(e.ranks.begin(), e.ranks.end(), [&](const auto& kv) {
      return kv.second.placement.host() == l.peer();
    });
    if (of_job) {
      e.slow_links.Add(r.placement.host(), l.peer(), static_cast<double>(l.rtt_us()) / 1e6,
                       clock_->Now());
    }
  }
}

// A STRAGGLER (or STRAGGLER_CLEARED) diagnosis naming a host with slow links, and its first rank.
void Coordinator::EmitSlowLink(Entry& e, const SlowLinkDetector::Change& c) {
  const RankRuntime* first = nullptr;
  for (const auto& [rank, r] : e.ranks) {
    if (r.placement.host() == c.host && first == nullptr) first = &r;
  }
  if (first == nullptr) return;
  const std::string node = first->placement.worker() + " (" + c.host + ")";
  trainyard::v1::Diagnosis d;
  d.set_kind(c.flagged ? trainyard::v1::Diagnosis::STRAGGLER
                       : trainyard::v1::Diagnosis::STRAGGLER_CLEARED);
  d.set_attempt(e.job.attempts_size());
  d.set_rank(first->placement.rank());
  d.set_worker(first->placement.worker());
  d.set_host(c.host);
  d.set_step(first->last_step.step());
  d.set_seconds(c.rtt_seconds);
  d.set_time_ms(NowMs());
  d.set_message(c.flagged ? node +
                                " is a straggler: its network links are slow, every link to or "
                                "from it takes at least " +
                                FormatSeconds(c.rtt_seconds) +
                                " per round trip, the other links' median is " +
                                FormatSeconds(c.others_seconds)
                          : node + "'s network links caught up");
  if (e.job.diagnoses_size() >= 100) e.job.mutable_diagnoses()->DeleteSubrange(0, 1);
  *e.job.add_diagnoses() = d;
  JobEvent event;
  *event.mutable_diagnosis() = std::move(d);
  (void)Emit(e, std::move(event));
}

}  // namespace trainyard::server
