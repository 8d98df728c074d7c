// Scheduler: gang placement. A job's ranks are placed all at once or not at all, on the free
// slots of alive workers (CPU slots for cpu jobs, GPUs for cuda jobs). The queue is strict
// first in, first out within a priority (higher priorities first): a job that does not fit
// yet blocks the ones behind it, so a large job is never starved by a stream of small ones.
// Pure functions of their arguments: no clock, no I/O, no locks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/status.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

struct WorkerCapacity {
  std::string name;
  std::string host;
  std::vector<int> free_slots;  // slot indices not in use, ascending
  int total_slots = 0;
  // Memory: what its CPU ranks may use in all and what ranks placed there take (estimates);
  // each slot's own memory for GPU slots. 0 (unknown): no memory check.
  int64_t memory_bytes = 0;
  int64_t memory_in_use_bytes = 0;
  int64_t slot_memory_bytes = 0;
};

struct GangRequest {
  std::string job_id;
  int world_size = 1;
  int ranks_per_node = 0;  // 0: any number of ranks per worker
  // An elastic job (spec::IsElastic): world_size is its max_world_size and it may be placed
  // with as few as min_world_size ranks when no more fit (prefer more). 0: world_size.
  int min_world_size = 0;
  bool gpu = false;
  // Each rank's memory (spec::EstimateRankMemory; 0: unknown, no check), and its Describe()
  // for messages.
  int64_t rank_memory_bytes = 0;
  std::string rank_memory;
};

// The request for job `job_id` of `spec`, with spec::EstimateRankMemory's estimate per rank
// (a text job's vocabulary taken as 256 characters, since only the data knows it).
GangRequest GangOf(const std::string& job_id, const spec::JobSpec& spec);

// A worker as the scheduler sees it, every slot and all its memory free (the caller takes out
// what is in use): CPU slots and memory for cpu jobs, GPUs and the smallest GPU's memory for
// cuda jobs.
WorkerCapacity CapacityOf(const trainyard::v1::WorkerInfo& info, bool gpu);

// How many of `job`'s ranks `w` can take now: its free slots, fewer where its free memory (or a
// GPU's own) does not hold that many ranks.
size_t RanksThatFit(const WorkerCapacity& w, const GangRequest& job);

// Ranks 0..world_size-1 (an elastic job: as many as fit, at least min_world_size) on `workers`'
// free slots, or nullopt when they do not fit now. Ranks on
// one worker get consecutive numbers. With ranks_per_node == 0 the job is packed onto as few
// workers as it fits on (most free slots first, then by name); otherwise world_size /
// ranks_per_node workers get ranks_per_node ranks each.
std::optional<std::vector<trainyard::v1::RankPlacement>> PlaceGang(
    const GangRequest& job, const std::vector<WorkerCapacity>& workers);

// OkStatus when the job fits on `workers` with every slot and all memory free; else
// FailedPrecondition saying what it needs (slots, or memory per rank) and what is registered
// (the job can never run here).
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
