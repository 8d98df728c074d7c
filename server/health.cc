#include "server/health.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <set>

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

// Note [Naming a hung rank].
std::optional<trainyard::v1::Diagnosis> NameHungRank(const std::vector<RankView>& ranks,
                                                     int64_t timeout_ms) {
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
    const double age = (silent ? r.status.report_age_ms() : r.status.phase_age_ms()) / 1000.0;
    d.set_seconds(age);
    std::string others;
    for (int w : waiters) others += (others.empty() ? "" : ", ") + std::to_string(w);
    d.set_message(RankName(r.placement) + " is hung: " +
                  (silent ? "no report for " + FormatSeconds(age) + ", last in phase " + d.phase()
                          : "in phase " + phase + " for " + FormatSeconds(age)) +
                  " at step " + std::to_string(r.status.step()) + ", while rank" +
                  (waiters.size() > 1 ? "s " : " ") + others + " wait" +
                  (waiters.size() > 1 ? "" : "s") + " in collective #" + std::to_string(seq));
    return d;
  }
  return std::nullopt;
}

bool SlowPhase(const std::string& phase) {
  return phase == "starting" || phase == "evaluate" || phase == "checkpoint";
}

// How long `s` has made no progress: no phase change and no completed collective (both ages
// include any silence since its last report).
int64_t QuietMs(const trainyard::v1::RankStatus& s) {
  return std::min(s.phase_age_ms(), s.collective_age_ms());
}

// "rank 0 on w0 (h0) no report for 65.0 s, last in phase backward at step 41", or "... in
// phase data for 70.0 s at step 41".
std::string DescribeQuiet(const RankView& r, bool silent) {
  const trainyard::v1::RankStatus& s = r.status;
  std::string out = RankName(r.placement) + " ";
  if (silent) {
    out += "no report for " + FormatSeconds(s.report_age_ms() / 1000.0) + ", last in phase " +
           s.phase();
  } else {
    out += "in phase " + s.phase() + " for " + FormatSeconds(QuietMs(s) / 1000.0);
  }
  out += " at step " + std::to_string(s.step());
  if (s.collectives_issued() > s.collectives_done()) {
    out += ", in collective #" + std::to_string(s.collectives_done() + 1);
  }
  return out;
}

// Note [A job that makes no progress].
std::optional<trainyard::v1::Diagnosis> FindStall(const std::vector<RankView>& ranks,
                                                  int64_t timeout_ms) {
  const RankView* longest = nullptr;
  int64_t job_quiet_ms = INT64_MAX;
  std::string described;
  for (const RankView& r : ranks) {
    if (r.status.exited()) continue;
    if (!r.reported) return std::nullopt;
    const bool silent = r.status.report_age_ms() >= timeout_ms;
    const double allowance = SlowPhase(r.status.phase()) ? kSlowPhaseFactor * timeout_ms
                                                         : static_cast<double>(timeout_ms);
    const int64_t quiet_ms = QuietMs(r.status);
    if (!silent && static_cast<double>(quiet_ms) < allowance) return std::nullopt;
    job_quiet_ms = std::min(job_quiet_ms, quiet_ms);
    if (longest == nullptr || quiet_ms > QuietMs(longest->status)) longest = &r;
    described += (described.empty() ? "" : "; ") + DescribeQuiet(r, silent);
  }
  if (longest == nullptr) return std::nullopt;  // every rank exited
  trainyard::v1::Diagnosis d;
  d.set_kind(trainyard::v1::Diagnosis::HANG);
  d.set_rank(longest->placement.rank());
  d.set_worker(longest->placement.worker());
  d.set_host(longest->placement.host());
  d.set_phase(longest->status.phase());
  d.set_step(longest->status.step());
  d.set_seconds(job_quiet_ms / 1000.0);
  d.set_message("no rank made progress for " + FormatSeconds(d.seconds()) +
                ", over the hang timeout of " + FormatSeconds(timeout_ms / 1000.0) + ": " +
                described);
  return d;
}

}  // namespace

std::string RankName(const trainyard::v1::RankPlacement& p) {
  return "rank " + std::to_string(p.rank()) + " on " + p.worker() + " (" + p.host() + ")";
}

std::optional<trainyard::v1::Diagnosis> FindHang(const std::vector<RankView>& ranks,
                                                 double hang_timeout_seconds) {
  const auto timeout_ms = static_cast<int64_t>(hang_timeout_seconds * 1000);
  if (auto d = NameHungRank(ranks, timeout_ms)) return d;
  return FindStall(ranks, timeout_ms);
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

void SlowLinkDetector::Add(const std::string& from, const std::string& to, double rtt_seconds,
                           Clock::TimePoint now) {
  links_[{from, to}] = {rtt_seconds, now};
}

std::vector<SlowLinkDetector::Change> SlowLinkDetector::Update(Clock::TimePoint now) {
  std::set<std::string> hosts;
  for (auto it = links_.begin(); it != links_.end();) {
    if (now - it->second.at > kFreshFor) {
      it = links_.erase(it);
      continue;
    }
    hosts.insert({it->first.first, it->first.second});
    ++it;
  }
  for (const auto& [host, f] : flagged_) {
    if (f) hosts.insert(host);  // a flag clears when its links are gone
  }
  std::vector<Change> changes;
  for (const std::string& host : hosts) {
    std::vector<double> touching, others;
    for (const auto& [ends, sample] : links_) {
      const bool touches = ends.first == host || ends.second == host;
      (touches ? touching : others).push_back(sample.rtt_seconds);
    }
    bool now_slow = false;
    double fastest = 0, median = 0;
    if (hosts.size() >= 3 && !touching.empty() && !others.empty()) {
      std::sort(others.begin(), others.end());
      const size_t n = others.size();
      median = n % 2 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
      fastest = *std::min_element(touching.begin(), touching.end());
      now_slow = fastest > factor_ * median && fastest - median >= kMinExcessSeconds;
    }
    bool& was = flagged_[host];
    if (now_slow != was) changes.push_back({host, now_slow, fastest, median});
    was = now_slow;
  }
  return changes;
}

std::vector<std::string> SlowLinkDetector::Flagged() const {
  std::vector<std::string> out;
  for (const auto& [host, f] : flagged_) {
    if (f) out.push_back(host);
  }
  return out;
}

}  // namespace trainyard::server
