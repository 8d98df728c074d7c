#include "worker/dist/flight_recorder.h"

#include <algorithm>

namespace trainyard::dist {

const char* CollectiveStateName(CollectiveState state) {
  switch (state) {
    case CollectiveState::kQueued:
      return "queued";
    case CollectiveState::kRunning:
      return "running";
    case CollectiveState::kDone:
      return "done";
    case CollectiveState::kFailed:
      return "failed";
  }
  return "unknown";
}

void FlightRecorder::SetPhaseSource(PhaseSource source) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = std::move(source);
}

void FlightRecorder::Issued(int64_t seq, const std::string& op, CollectiveSize size) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  CollectiveRecord& r = ring_[static_cast<size_t>(seq) % kCapacity];
  r = CollectiveRecord{};
  r.seq = seq;
  r.op = op;
  r.size = std::move(size);
  r.issued = now;
  if (phase_) r.phase = phase_();
  last_seq_ = std::max(last_seq_, seq);
}

CollectiveRecord* FlightRecorder::Find(int64_t seq) {
  if (seq <= 0) return nullptr;
  CollectiveRecord& r = ring_[static_cast<size_t>(seq) % kCapacity];
  return r.seq == seq ? &r : nullptr;
}

void FlightRecorder::Started(int64_t seq) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (CollectiveRecord* r = Find(seq)) {
    r->state = CollectiveState::kRunning;
    r->started = now;
  }
}

void FlightRecorder::Finished(int64_t seq, bool ok) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (CollectiveRecord* r = Find(seq)) {
    r->state = ok ? CollectiveState::kDone : CollectiveState::kFailed;
    r->ended = now;
  }
}

std::vector<CollectiveRecord> FlightRecorder::Last(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  n = std::min(n, kCapacity);
  std::vector<CollectiveRecord> out;
  out.reserve(n);
  const int64_t first = std::max<int64_t>(1, last_seq_ - static_cast<int64_t>(n) + 1);
  for (int64_t seq = first; seq <= last_seq_; ++seq) {
    const CollectiveRecord& r = ring_[static_cast<size_t>(seq) % kCapacity];
    if (r.seq == seq) out.push_back(r);
  }
  return out;
}

bool NeedsReport(const std::vector<CollectiveRecord>& records, CollectiveRecord::TimePoint now,
                 std::chrono::milliseconds stuck_after) {
  return std::any_of(records.begin(), records.end(), [&](const CollectiveRecord& r) {
    if (r.state == CollectiveState::kFailed) return true;
    return r.state != CollectiveState::kDone && now - r.issued >= stuck_after;
  });
}

}  // namespace trainyard::dist
