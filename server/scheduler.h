// Scheduler: gang placement. A job's ranks are placed all at once or not at all, on the free
// slots of alive workers (CPU slots for cpu jobs, GPUs for cuda jobs). The queue is strict
// first in, first out within a priority (higher priorities first): a job that does not fit
// yet blocks the ones behind it, so a large job is never starved by a stream of small ones.
// Pure functions of their arguments: no clock, no I/O, no locks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

struct WorkerCapacity {
  std::string name;
  std::string host;
  std::vector<int> free_slots;  // slot indices not in use, ascending
  int total_slots = 0;
};

struct GangRequest {
  std::string job_id;
  int world_size = 1;
  int ranks_per_node = 0;  // 0: any number of ranks per worker
  bool gpu = false;
};

// Ranks 0..world_size-1 on `workers`' free slots, or nullopt when they do not fit now. Ranks on
// one worker get consecutive numbers. With ranks_per_node == 0 the job is packed onto as few
// workers as it fits on (most free slots first, then by name); otherwise world_size /
// ranks_per_node workers get ranks_per_node ranks each.
std::optional<std::vector<trainyard::v1::RankPlacement>> PlaceGang(
    const GangRequest& job, const std::vector<WorkerCapacity>& workers);

// OkStatus when the job fits on `workers` with every slot free; else FailedPrecondition saying
// what it needs and what is registered (the job can never run here).
Status CheckCanEverFit(const GangRequest& job, const std::vector<WorkerCapacity>& workers);

// One scheduling pass over `queue` (in queue order: priority, then submit order) against
// `workers`: the placements made, in order, stopping at the first job that does not fit.
// `workers` loses the slots it hands out.
struct Placement {
  std::string job_id;
  std::vector<trainyard::v1::RankPlacement> ranks;
};
std::vector<Placement> Schedule(const std::vector<GangRequest>& queue,
                                std::vector<WorkerCapacity>* workers);

}  // namespace trainyard::server
