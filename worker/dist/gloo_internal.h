// Helpers shared by the files of GlooProcessGroup (gloo_process_group.cc, gloo_connect.cc,
// gloo_reduce_scatter.cc). Internal to the backend; compiled only with Gloo (TY_HAVE_GLOO).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/dist/gloo_process_group.h"
#include "worker/dist/shm_comm.h"

namespace trainyard::dist::internal {

// Gloo uses slot prefixes 0x01..0x08 for its collectives; ours stay clear of them.
inline constexpr uint8_t kReduceScatterSlotPrefix = 0x20;
inline constexpr uint8_t kExchangeSlotPrefix = 0x21;
inline constexpr uint8_t kPointToPointSlotPrefix = 0x22;

// A new T(args...) that lives as long as `keep` (Note [Parking a failed op] in
// gloo_process_group.cc).
template <typename T, typename... Args>
std::shared_ptr<T> Keep(GlooProcessGroup::KeepAlive& keep, Args&&... args) {
  auto p = std::make_shared<T>(std::forward<Args>(args)...);
  keep.push_back(p);
  return p;
}

// What an op's closure throws when a shared-memory collective fails; Run() names the op.
struct ShmFailure {
  Status status;
};
inline void ThrowIfFailed(Status st) {
  if (!st.ok()) throw ShmFailure{std::move(st)};
}

// How a group uses shared memory (gloo_hosts.cc): `shm` null: not at all (another algorithm
// than "auto", ranks spread unevenly over hosts, or a segment could not be made somewhere);
// `shm` and no cross ranks: every rank is on this host; `shm` and cross ranks: this host's
// segment plus a ring across hosts among the ranks with this local rank (`cross_ranks`, one per
// host in host order, this one at `cross_rank`). Every rank of the group reaches the same plan.
struct ShmPlan {
  std::unique_ptr<ShmComm> shm;
  std::vector<int> cross_ranks;
  int cross_rank = -1;
  int local_rank = -1;
};
StatusOr<ShmPlan> PlanSharedMemory(Store& store, int rank, int size,
                                   const ProcessGroupOptions& options);

// a mod n in [0, n), also for negative a.
inline int Mod(int a, int n) { return ((a % n) + n) % n; }

// Gloo's messages carry "[/path/file.cc:123] " prefixes (GLOO_ERROR_MSG); people need the rest.
// (gloo_process_group.cc)
std::string CleanGlooText(const std::string& text);

// Whether `text` contains `what`.
inline bool Contains(const std::string& text, const char* what) {
  return text.find(what) != std::string::npos;
}

}  // namespace trainyard::dist::internal
