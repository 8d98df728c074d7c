#include "worker/daemon/lease.h"

#include <cstdio>
#include <map>
#include <utility>

namespace trainyard::daemon {
namespace {

std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

std::string DescribeLease(std::chrono::milliseconds lease) {
  return lease.count() > 0 ? Seconds(lease) : "none";
}

void WorkerLease::Renew(TimePoint now, int64_t announced_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (announced_ms > 0) announced_ = std::chrono::milliseconds(announced_ms);
  if (now > last_heard_) last_heard_ = now;
  reported_ = false;
}

std::chrono::milliseconds WorkerLease::lease() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (announced_.count() == 0) return announced_;
  return override_.count() > 0 ? override_ : announced_;
}

std::optional<std::chrono::milliseconds> WorkerLease::Expired(TimePoint now) {
  const std::chrono::milliseconds lease_now = lease();
  std::lock_guard<std::mutex> lock(mu_);
  if (lease_now.count() == 0 || reported_) return std::nullopt;
  const auto silence = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_);
  if (silence <= lease_now) return std::nullopt;
  reported_ = true;
  return silence;
}

std::string LeaseLostMessage(std::chrono::milliseconds silence, std::chrono::milliseconds lease,
                             const std::vector<trainyard::v1::RankStatus>& running) {
  std::map<std::pair<std::string, int>, std::string> ranks;  // (job, attempt) -> "0, 1"
  for (const trainyard::v1::RankStatus& s : running) {
    if (s.exited()) continue;
    std::string& list = ranks[{s.job_id(), s.attempt()}];
    list += (list.empty() ? "" : ", ") + std::to_string(s.rank());
  }
  std::string out =
      "lost the coordinator for " + Seconds(silence) + " (lease " + Seconds(lease) + "): stopping ";
  if (ranks.empty()) return out + "no ranks (none running)";
  bool first = true;
  for (const auto& [key, list] : ranks) {
    out += std::string(first ? "" : "; ") + "job " + key.first + " attempt " +
           std::to_string(key.second) + " ranks " + list;
    first = false;
  }
  return out;
}

}  // namespace trainyard::daemon
