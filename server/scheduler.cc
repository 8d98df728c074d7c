#include "server/scheduler.h"

#include <algorithm>

namespace trainyard::server {
namespace {

// Workers with free slots, most free first, then by name.
std::vector<const WorkerCapacity*> ByFreeSlots(const std::vector<WorkerCapacity>& workers,
                                               size_t at_least) {
  std::vector<const WorkerCapacity*> out;
  for (const WorkerCapacity& w : workers) {
    if (w.free_slots.size() >= std::max<size_t>(at_least, 1)) out.push_back(&w);
  }
  std::stable_sort(out.begin(), out.end(), [](const WorkerCapacity* a, const WorkerCapacity* b) {
    if (a->free_slots.size() != b->free_slots.size()) {
      return a->free_slots.size() > b->free_slots.size();
    }
    return a->name < b->name;
  });
  return out;
}

void Add(const WorkerCapacity& w, size_t count, std::vector<trainyard::v1::RankPlacement>* out) {
  for (size_t i = 0; i < count; ++i) {
    trainyard::v1::RankPlacement p;
    p.set_rank(static_cast<int>(out->size()));
    p.set_worker(w.name);
    p.set_host(w.host);
    p.set_slot(w.free_slots[i]);
    out->push_back(std::move(p));
  }
}

}  // namespace

std::optional<std::vector<trainyard::v1::RankPlacement>> PlaceGang(
    const GangRequest& job, const std::vector<WorkerCapacity>& workers) {
  std::vector<trainyard::v1::RankPlacement> ranks;
  const size_t world = static_cast<size_t>(job.world_size);
  if (job.ranks_per_node > 0) {
    const size_t per = static_cast<size_t>(job.ranks_per_node);
    const size_t nodes = world / per;
    std::vector<const WorkerCapacity*> fit = ByFreeSlots(workers, per);
    if (fit.size() < nodes) return std::nullopt;
    for (size_t n = 0; n < nodes; ++n) Add(*fit[n], per, &ranks);
    return ranks;
  }
  for (const WorkerCapacity* w : ByFreeSlots(workers, 1)) {
    if (ranks.size() == world) break;
    Add(*w, std::min(w->free_slots.size(), world - ranks.size()), &ranks);
  }
  if (ranks.size() < world) return std::nullopt;
  return ranks;
}

Status CheckCanEverFit(const GangRequest& job, const std::vector<WorkerCapacity>& workers) {
  std::vector<WorkerCapacity> empty = workers;
  int total = 0;
  for (WorkerCapacity& w : empty) {
    w.free_slots.clear();
    for (int s = 0; s < w.total_slots; ++s) w.free_slots.push_back(s);
    total += w.total_slots;
  }
  if (PlaceGang(job, empty)) return OkStatus();
  const std::string unit = job.gpu ? "GPU" : "CPU slot";
  std::string need = "parallelism.world_size = " + std::to_string(job.world_size) + " needs " +
                     std::to_string(job.world_size) + " " + unit + "s";
  if (job.ranks_per_node > 0) {
    need += ", " + std::to_string(job.ranks_per_node) + " on each of " +
            std::to_string(job.world_size / job.ranks_per_node) + " workers";
  }
  return FailedPreconditionError(need + "; the " + std::to_string(workers.size()) +
                                 " alive workers have " + std::to_string(total) + " " + unit +
                                 "s in all (lower world_size or add workers)");
}

std::vector<Placement> Schedule(const std::vector<GangRequest>& queue,
                                std::vector<WorkerCapacity>* workers) {
  std::vector<Placement> out;
  for (const GangRequest& job : queue) {
    std::optional<std::vector<trainyard::v1::RankPlacement>> ranks = PlaceGang(job, *workers);
    if (!ranks) break;  // strict FIFO: nothing overtakes the head of the queue
    for (const trainyard::v1::RankPlacement& p : *ranks) {
      for (WorkerCapacity& w : *workers) {
        if (w.name != p.worker()) continue;
        w.free_slots.erase(std::find(w.free_slots.begin(), w.free_slots.end(), p.slot()));
      }
    }
    out.push_back({job.job_id, std::move(*ranks)});
  }
  return out;
}

}  // namespace trainyard::server
