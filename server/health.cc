#include "server/health.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace trainyard::server {
std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

namespace {

bool Waiting(const trainyard::v1::RankStatus& s, int64_t timeout_ms) {
  return s.collectives_issued() > s.collectives_done() && s.collective_age_ms() >= timeout_ms;
}

}  // namespace

std::optional<trainyard::v1::Diagnosis> FindHang(const std::vector<RankView>& ranks,
                                                 double hang_timeout_seconds) {
  const auto timeout_ms = static_cast<int64_t>(hang_timeout_seconds * 1000);
  // A waiter must be clearly alive: a rank that stopped just now still looks like a waiter
  // for a while (it was waiting when it stopped), and must not pass for one.
  const int64_t fresh_ms = std::min<int64_t>(timeout_ms / 2, 10000);
  std::vector<int> waiters;
  int64_t seq = 0;
  for (const RankView& r : ranks) {
    if (!r.reported || r.status.exited() || r.status.report_age_ms() >= fresh_ms) continue;
    if (Waiting(r.status, timeout_ms)) {
      waiters.push_back(r.placement.rank());
      seq = std::max(seq, r.status.collectives_done() + 1);
    }
  }
  if (waiters.empty()) return std::nullopt;
  for (const RankView& r : ranks) {
    if (std::find(waiters.begin(), waiters.end(), r.placement.rank()) != waiters.end()) continue;
    if (r.status.exited()) continue;
    const bool silent = !r.reported || r.status.report_age_ms() >= timeout_ms;
    const std::string& phase = r.status.phase();
    // Stuck: alive, in one phase for the timeout, and in no collective (a rank inside one is
    // waiting too, if not yet for as long as the others).
    const bool in_collective = r.status.collectives_issued() > r.status.collectives_done();
    const bool stuck = !silent && phase != "evaluate" && phase != "checkpoint" && !in_collective &&
                       r.status.phase_age_ms() >= timeout_ms;
    if (!silent && !stuck) continue;
    trainyard::v1::Diagnosis d;
    d.set_kind(trainyard::v1::Diagnosis::HANG);
    d.set_rank(r.placement.rank());
    d.set_worker(r.placement.worker());
    d.set_host(r.placement.host());
    d.set_phase(r.reported ? phase : "starting");
    d.set_step(r.status.step());
    d.set_collective_seq(seq);
    const double age =
        (silent ? r.status.report_age_ms() : r.status.phase_age_ms()) / 1000.0;
    d.set_seconds(age);
    std::string others;
    for (int w : waiters) others += (others.empty() ? "" : ", ") + std::to_string(w);
    d.set_message("rank " + std::to_string(r.placement.rank()) + " on " + r.placement.worker() +
                  " (" + r.placement.host() + ") is hung: " +
                  (silent ? "no report for " + FormatSeconds(age) + ", last in phase " + d.phase()
                          : "in phase " + phase + " for " + FormatSeconds(age)) +
                  " at step " + std::to_string(r.status.step()) + ", while rank" +
                  (waiters.size() > 1 ? "s " : " ") + others + " wait" +
                  (waiters.size() > 1 ? "" : "s") + " in collective #" + std::to_string(seq));
    return d;
  }
  return std::nullopt;
}

void StragglerDetector::AddStep(int rank, double compute_seconds) {
  std::deque<double>& q = steps_[rank];
  q.push_back(compute_seconds);
  while (q.size() > window_) q.pop_front();
}

std::vector<StragglerDetector::Change> StragglerDetector::Update() {
  std::vector<Change> changes;
  if (static_cast<int>(steps_.size()) < world_size_ || world_size_ < 2) return changes;
  std::map<int, double> means;
  for (const auto& [rank, q] : steps_) {
    if (q.size() < window_) return changes;
    means[rank] = std::accumulate(q.begin(), q.end(), 0.0) / static_cast<double>(q.size());
  }
  for (const auto& [rank, m] : means) {
    // The median of the other ranks: with two ranks, the whole job's median could never be
    // exceeded by a factor above 1.
    std::vector<double> others;
    for (const auto& [other, om] : means) {
      if (other != rank) others.push_back(om);
    }
    std::sort(others.begin(), others.end());
    const size_t n = others.size();
    const double median = n % 2 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
    const bool now = median > 0 && m > factor_ * median && m - median >= kMinExcessSeconds;
    bool& was = flagged_[rank];
    if (now != was) changes.push_back({rank, now, m, median});
    was = now;
  }
  return changes;
}

std::vector<int> StragglerDetector::Flagged() const {
  std::vector<int> out;
  for (const auto& [rank, f] : flagged_) {
    if (f) out.push_back(rank);
  }
  return out;
}

}  // namespace trainyard::server
