#include "server/scheduler.h"

#include <algorithm>

#include "common/spec/job_memory.h"

namespace trainyard::server {
namespace {

// Workers that can take at least `at_least` (and 1) of the job's ranks, most first, then by name.
std::vector<const WorkerCapacity*> ByFreeSlots(const std::vector<WorkerCapacity>& workers,
                                               const GangRequest& job, size_t at_least) {
  std::vector<const WorkerCapacity*> out;
  for (const WorkerCapacity& w : workers) {
    if (RanksThatFit(w, job) >= std::max<size_t>(at_least, 1)) out.push_back(&w);
  }
  std::stable_sort(out.begin(), out.end(), [&](const WorkerCapacity* a, const WorkerCapacity* b) {
    const size_t fa = RanksThatFit(*a, job), fb = RanksThatFit(*b, job);
    if (fa != fb) return fa > fb;
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

GangRequest GangOf(const std::string& job_id, const spec::JobSpec& spec) {
  constexpr int64_t kUnknownVocabulary = 256;
  const spec::MemoryEstimate m = spec::EstimateRankMemory(spec, kUnknownVocabulary);
  const spec::ParallelismSpec& p = spec.parallelism;
  const bool elastic = spec::IsElastic(p);
  return {job_id,
          elastic ? spec::MaxWorldSize(p) : p.world_size,
          p.ranks_per_node,
          elastic ? spec::MinWorldSize(p) : 0,
          spec.device == "cuda",
          m.total_bytes(),
          m.Describe()};
}

WorkerCapacity CapacityOf(const trainyard::v1::WorkerInfo& info, bool gpu) {
  WorkerCapacity c;
  c.name = info.name();
  c.host = info.host();
  c.total_slots = gpu ? info.gpus_size() : info.cpu_slots();
  for (int s = 0; s < c.total_slots; ++s) c.free_slots.push_back(s);
  if (!gpu) c.memory_bytes = info.memory_bytes();
  for (const auto& g : info.gpus()) {
    if (gpu && g.memory_bytes() > 0 &&
        (c.slot_memory_bytes == 0 || g.memory_bytes() < c.slot_memory_bytes)) {
      c.slot_memory_bytes = g.memory_bytes();
    }
  }
  return c;
}

size_t RanksThatFit(const WorkerCapacity& w, const GangRequest& job) {
  size_t n = w.free_slots.size();
  const int64_t need = job.rank_memory_bytes;
  if (need <= 0) return n;
  if (w.slot_memory_bytes > 0 && need > w.slot_memory_bytes) return 0;
  if (w.memory_bytes > 0 && !job.gpu) {
    const int64_t free = std::max<int64_t>(w.memory_bytes - w.memory_in_use_bytes, 0);
    n = std::min(n, static_cast<size_t>(free / need));
  }
  return n;
}

std::optional<std::vector<trainyard::v1::RankPlacement>> PlaceGang(
    const GangRequest& job, const std::vector<WorkerCapacity>& workers) {
  std::vector<trainyard::v1::RankPlacement> ranks;
  const size_t world = static_cast<size_t>(job.world_size);
  if (job.ranks_per_node > 0) {
    const size_t per = static_cast<size_t>(job.ranks_per_node);
    const size_t nodes = world / per;
    std::vector<const WorkerCapacity*> fit = ByFreeSlots(workers, job, per);
    if (fit.size() < nodes) return std::nullopt;
    for (size_t n = 0; n < nodes; ++n) Add(*fit[n], per, &ranks);
    return ranks;
  }
  for (const WorkerCapacity* w : ByFreeSlots(workers, job, 1)) {
    if (ranks.size() == world) break;
    Add(*w, std::min(RanksThatFit(*w, job), world - ranks.size()), &ranks);
  }
  const size_t least = job.min_world_size > 0 ? static_cast<size_t>(job.min_world_size) : world;
  if (ranks.size() < least) return std::nullopt;
  return ranks;
}

Status CheckCanEverFit(const GangRequest& request, const std::vector<WorkerCapacity>& workers) {
  GangRequest job = request;  // an elastic job can run with its min_world_size
  if (job.min_world_size > 0) job.world_size = job.min_world_size;
  std::vector<WorkerCapacity> empty = workers;
  int total = 0;
  int64_t most_memory = 0;
  for (WorkerCapacity& w : empty) {
    w.free_slots.clear();
    for (int s = 0; s < w.total_slots; ++s) w.free_slots.push_back(s);
    w.memory_in_use_bytes = 0;
    total += w.total_slots;
    most_memory = std::max(most_memory, job.gpu ? w.slot_memory_bytes : w.memory_bytes);
  }
  if (PlaceGang(job, empty)) return OkStatus();
  GangRequest slots_only = job;
  slots_only.rank_memory_bytes = 0;
  if (PlaceGang(slots_only, empty)) {
    return FailedPreconditionError(
        "the job needs " + job.rank_memory + "; the alive workers do not have the memory for " +
        std::to_string(job.world_size) + " such ranks (the most any " +
        (job.gpu ? "GPU" : "worker") + " has is " + spec::FormatBytes(most_memory) +
        "): lower batch_size, the model's size or context, use ZeRO (parallelism.zero_stage: 3) "
        "or add memory");
  }
  const std::string unit = job.gpu ? "GPU" : "CPU slot";
  const char* field = request.min_world_size > 0 ? "min_world_size" : "world_size";
  std::string need = "parallelism." + std::string(field) + " = " + std::to_string(job.world_size) +
                     " needs " + std::to_string(job.world_size) + " " + unit + "s";
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
        if (!job.gpu) w.memory_in_use_bytes += job.rank_memory_bytes;
      }
    }
    out.push_back({job.job_id, std::move(*ranks)});
  }
  return out;
}

}  // namespace trainyard::server
