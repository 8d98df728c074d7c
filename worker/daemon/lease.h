// WorkerLease: how long this worker may keep its ranks running without hearing from the
// coordinator (Note [Checkpoint fence] in worker/trainer/checkpoint_fence.h; the lease in
// docs/operations.md). The coordinator acknowledges every heartbeat (WorkerCommand.ack) and
// names the lease at registration (RegisterWorkerResponse.lease_ms, 3/4 of its heartbeat
// timeout); any message from it renews the lease. Once the lease runs out, the coordinator may
// have declared this worker lost and started the next attempt of its jobs elsewhere, so the
// daemon stops its ranks (a partitioned worker's ranks stop before the coordinator gives up on
// them). Thread-safe: the heartbeat reader renews it, the supervisor thread checks it.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/v1/service.pb.h"

namespace trainyard::daemon {

class WorkerLease {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `override_lease` > 0 replaces the coordinator's lease (--lease); it applies only once a
  // coordinator announced a lease (one that sends no acknowledgements gets none).
  explicit WorkerLease(std::chrono::milliseconds override_lease = std::chrono::milliseconds(0))
      : override_(override_lease) {}

  // Something arrived from the coordinator at `now`; `announced_ms` > 0 is the lease it named.
  void Renew(TimePoint now, int64_t announced_ms = 0);

  // How long the coordinator has been silent, when that is longer than the lease at `now`;
  // once per silence (nullopt again until renewed). Never before a lease was announced.
  std::optional<std::chrono::milliseconds> Expired(TimePoint now);

  // The lease in force (0: none yet).
  std::chrono::milliseconds lease() const;

 private:
  const std::chrono::milliseconds override_;
  mutable std::mutex mu_;
  std::chrono::milliseconds announced_{0};
  TimePoint last_heard_{};
  bool reported_ = false;  // this silence was returned by Expired
};

// "7.5 s", or "none" for 0.
std::string DescribeLease(std::chrono::milliseconds lease);

// "lost the coordinator for 8.2 s (lease 7.5 s): stopping job j-1 attempt 2 ranks 0, 1"
// for the ranks in `running` not yet exited (jobs and attempts in order, "; " between them).
std::string LeaseLostMessage(std::chrono::milliseconds silence, std::chrono::milliseconds lease,
                             const std::vector<trainyard::v1::RankStatus>& running);

}  // namespace trainyard::daemon
