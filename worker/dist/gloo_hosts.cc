// Where a gloo group's ranks run, and the shared-memory plan that follows (gloo_internal.h):
// one host: everything through one segment; several hosts with the same number (>= 2) of ranks
// each: a segment per host and a cross-host ring per local rank (Note [Hierarchical all-reduce]
// in gloo_hierarchical.cc); anything else: TCP only.
#include <cstdio>
#include <map>

#include "worker/dist/gloo_internal.h"
#include "worker/dist/shm_internal.h"

namespace trainyard::dist::internal {
namespace {

// The ranks of each host, hosts ordered by their first rank, from every rank's HostKey.
StatusOr<std::vector<std::vector<int>>> HostsOf(Store& store, int rank, int size,
                                                std::chrono::milliseconds timeout) {
  const std::string who = "gloo: rank " + std::to_string(rank);
  RETURN_IF_ERROR(store.Set("shm/host/" + std::to_string(rank), HostKey()).WithContext(who));
  std::map<std::string, size_t> index;
  std::vector<std::vector<int>> hosts;
  for (int r = 0; r < size; ++r) {
    auto key = store.Get("shm/host/" + std::to_string(r), timeout);
    if (!key.ok()) return key.status().WithContext(who + " reading the hosts of the group");
    auto [it, added] = index.emplace(*key, hosts.size());
    if (added) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  return hosts;
}

// Every rank says whether its host's segment works; all take the same decision.
StatusOr<bool> AllHaveSegments(Store& store, int rank, int size, bool mine,
                               std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(store.Set("shm/ok/" + std::to_string(rank), mine ? "1" : "0"));
  bool all = true;
  for (int r = 0; r < size; ++r) {
    auto said = store.Get("shm/ok/" + std::to_string(r), timeout);
    if (!said.ok()) return said.status().WithContext("gloo: rank " + std::to_string(rank));
    all = all && *said == "1";
  }
  return all;
}

}  // namespace

StatusOr<ShmPlan> PlanSharedMemory(Store& store, int rank, int size,
                                   const ProcessGroupOptions& options) {
  ShmPlan plan;
  if (options.algorithm != "auto" || size < 2) return plan;
  ASSIGN_OR_RETURN(std::vector<std::vector<int>> hosts,
                   HostsOf(store, rank, size, options.timeout));
  const size_t per_host = hosts[0].size();
  bool even = per_host >= 2 && per_host <= static_cast<size_t>(kShmMaxRanks);
  for (const auto& h : hosts) even = even && h.size() == per_host;
  if (!even) return plan;  // the same on every rank: TCP only
  size_t host = 0, local = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (size_t l = 0; l < per_host; ++l) {
      if (hosts[h][l] == rank) host = h, local = l;
    }
  }
  auto shm = ShmComm::Create(store, hosts[host], static_cast<int>(local), options.shm_tag,
                             options.timeout);
  if (!shm.ok() && shm.status().code() != StatusCode::kUnavailable) return shm.status();
  if (!shm.ok()) {
    std::fprintf(stderr, "gloo: rank %d: shared memory unavailable, collectives go over TCP: %s\n",
                 rank, shm.status().message().c_str());
  }
  ASSIGN_OR_RETURN(bool all, AllHaveSegments(store, rank, size, shm.ok(), options.timeout));
  if (!all) return plan;
  plan.shm = std::move(*shm);
  if (hosts.size() > 1) {
    for (const auto& h : hosts) plan.cross_ranks.push_back(h[local]);
    plan.cross_rank = static_cast<int>(host);
    plan.local_rank = static_cast<int>(local);
  }
  return plan;
}

}  // namespace trainyard::dist::internal
