// Coordinator, the collective reports of a running attempt (Note [Collective flight recorder] in
// collective_report.h): when to make one, and where it goes (Job.collectives, a JobEvent).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "server/collective_report.h"
#include "server/coordinator.h"

namespace trainyard::server {
namespace {

using trainyard::v1::CollectiveReport;

constexpr int kMaxReports = 20;  // Job.collectives

bool AnyFailed(const std::vector<RankView>& views) {
  for (const RankView& v : views) {
    for (const auto& c : v.status.collectives()) {
      if (c.state() == "failed") return true;
    }
  }
  return false;
}

// Whether a rank sent flight records: one of its collectives is stuck, or failed.
bool AnyRecords(const std::vector<RankView>& views) {
  return std::any_of(views.begin(), views.end(),
                     [](const RankView& v) { return v.status.collectives_size() > 0; });
}

// The culprits of `r` with their states: a missing rank that turns silent (a stopped rank's
// last report ages past the threshold) is news.
std::vector<std::pair<int, std::string>> Culprits(const CollectiveReport& r) {
  std::vector<std::pair<int, std::string>> out;
  for (const auto& row : r.rows()) {
    if (row.state() == "missing" || row.state() == "silent") {
      out.emplace_back(row.rank(), row.state());
    }
  }
  return out;
}

// Whether `r` names a rank that holds the others up: a silent one, or a missing one outside the
// phases where the others legitimately wait for it (rank 0 evaluating or checkpointing, a rank
// still starting; as in Note [Naming a hung rank]).
bool NamesCulprit(const CollectiveReport& r) {
  return std::any_of(r.rows().begin(), r.rows().end(), [](const auto& row) {
    const std::string& phase = row.phase();
    return row.state() == "silent" || (row.state() == "missing" && phase != "evaluate" &&
                                       phase != "checkpoint" && phase != "starting");
  });
}

// Whether `b` says nothing that `a` did not: the same attempt, collective, culprits and kind.
bool SameFinding(const CollectiveReport& a, const CollectiveReport& b) {
  return a.attempt() == b.attempt() && a.seq() == b.seq() && a.hang() == b.hang() &&
         Culprits(a) == Culprits(b);
}

}  // namespace

void Coordinator::CheckCollectives(Entry& e, const std::vector<RankView>& views, bool hang) {
  if (!hang && !AnyRecords(views)) return;  // healthy: nothing is stuck
  const auto timeout_ms = static_cast<int64_t>(e.spec.fault_tolerance.hang_timeout_seconds * 1000);
  // Silent: no report for half the timeout (at most 10 s, as a waiter's freshness in FindHang),
  // but never less than two heartbeats: a report may be that old in a healthy worker.
  const auto heartbeats_ms =
      2 * std::chrono::duration_cast<std::chrono::milliseconds>(options_.heartbeat_interval)
              .count() +
      500;
  const int64_t silent_after_ms =
      std::max<int64_t>(std::min<int64_t>(timeout_ms / 2, 10000), heartbeats_ms);
  std::optional<CollectiveReport> report = BuildCollectiveReport(views, silent_after_ms);
  if (!report) return;
  // Early: once a rank waited half the hang timeout and a culprit is named.
  const bool early = NamesCulprit(*report) && LongestWait(*report) * 1000 >= timeout_ms / 2;
  if (!hang && !early && !AnyFailed(views)) return;
  report->set_attempt(e.job.attempts_size());
  report->set_time_ms(NowMs());
  report->set_hang(hang);
  auto* reports = e.job.mutable_collectives();
  const bool same_attempt = !reports->empty() && reports->rbegin()->attempt() == report->attempt();
  if (same_attempt && SameFinding(*reports->rbegin(), *report)) return;
  if (same_attempt) {
    *reports->rbegin() = *report;  // the latest of each attempt
  } else {
    if (reports->size() >= kMaxReports) reports->DeleteSubrange(0, 1);
    *e.job.add_collectives() = *report;
  }
  TY_LOG(WARNING) << "job " << e.job.id() << ": collectives: " << report->verdict();
  trainyard::v1::JobEvent event;
  *event.mutable_collectives() = *std::move(report);
  (void)Emit(e, std::move(event));
}

}  // namespace trainyard::server
