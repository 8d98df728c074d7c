// FlightRecorder: the last collectives of one rank, so that a hang can be explained (issue 24;
// Note [Collective flight recorder] in server/collective_report.h).
//
// A ring of the last kCapacity collectives a ProcessGroup issued: sequence number, op, size,
// state, times, and the trainer's phase when it was issued. The group's backend records into it
// (Issued on the issuing thread, Started and Finished on the group's thread); the rank's reporter
// reads it (Last) and sends it to the coordinator while a collective is stuck or after one failed
// (NeedsReport). Thread-safe: one mutex, held only to update or copy a few records.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace trainyard::dist {

enum class CollectiveState { kQueued, kRunning, kDone, kFailed };
const char* CollectiveStateName(CollectiveState state);  // "queued", "running", "done", "failed"

// What one collective moves, per rank.
struct CollectiveSize {
  int64_t numel = 0;  // elements this rank contributes; 0 for a barrier
  std::string dtype;  // "float32", as DTypeName spells it; "" for a barrier
  int64_t bytes = 0;  // numel x the element size
};

struct CollectiveRecord {
  using TimePoint = std::chrono::steady_clock::time_point;
  int64_t seq = 0;  // the group's sequence number, from 1; 0: an empty slot
  std::string op;   // "all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"
  CollectiveSize size;
  CollectiveState state = CollectiveState::kQueued;
  // Steady clock; a default TimePoint until it happens.
  TimePoint issued{}, started{}, ended{};
  std::string phase;  // the trainer's phase when it was issued ("backward"); "" when unknown
};

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 64;

  // Returns the trainer's phase now, as a string with static storage ("forward"). Must be cheap
  // and callable from any thread: Issued calls it for every collective.
  using PhaseSource = std::function<const char*()>;
  // Set once, before the group's first collective (the rank sets it; dist/ does not know the
  // trainer). Without one, records have no phase.
  void SetPhaseSource(PhaseSource source);

  // Collective `seq` was queued; it replaces the record kCapacity collectives older.
  void Issued(int64_t seq, const std::string& op, CollectiveSize size);
  // It began running on the group's thread (or device).
  void Started(int64_t seq);
  // It completed (ok) or failed, was aborted or cancelled (!ok). Ignored for a seq no longer
  // in the ring.
  void Finished(int64_t seq, bool ok);

  // The last `n` records (at most kCapacity), oldest first.
  std::vector<CollectiveRecord> Last(size_t n) const;

 private:
  CollectiveRecord* Find(int64_t seq);  // under mu_; null when it left the ring

  mutable std::mutex mu_;
  std::array<CollectiveRecord, kCapacity> ring_;  // record of seq s at s % kCapacity
  int64_t last_seq_ = 0;
  PhaseSource phase_;
};

// Whether a rank should send `records` (FlightRecorder::Last) with its status: one of them is
// unfinished and was issued at least `stuck_after` before `now`, or one failed.
bool NeedsReport(const std::vector<CollectiveRecord>& records, CollectiveRecord::TimePoint now,
                 std::chrono::milliseconds stuck_after);

}  // namespace trainyard::dist
