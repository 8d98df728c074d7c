// The layout of ShmComm's segment (shm_comm.h), shared by shm_segment.cc and shm_comm.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "worker/dist/shm_comm.h"

namespace trainyard::dist::internal {

inline constexpr uint64_t kShmMagic = 0x7472796172647368;  // "trayrdsh"
inline constexpr int kShmMaxRanks = 64;
// Each rank has two buffers of this size (rounds alternate between them).
inline constexpr size_t kShmBufferBytes = size_t{1} << 20;
inline constexpr size_t kShmDataOffset = 16384;

// One rank's line: its arrival generation (Note [Shared-memory collectives]) and its pid.
struct alignas(64) ShmSlot {
  std::atomic<uint64_t> gen{0};
  int32_t pid = 0;
};

struct ShmHeader {
  uint64_t magic = 0;
  int32_t size = 0;
  // Bumped by every arrival; sleepers wait on it with a futex (shared, not private).
  alignas(64) std::atomic<uint32_t> epoch{0};
  std::atomic<uint32_t> sleepers{0};
  // 0, then 1 while the first breaker writes `why`, then 2.
  alignas(64) std::atomic<uint32_t> broken{0};
  int32_t broken_by = -1;  // a group rank
  int32_t code = 0;        // the StatusCode of its failure
  char why[512] = {};
  ShmSlot slots[kShmMaxRanks];
};
static_assert(sizeof(ShmHeader) <= kShmDataOffset, "the header overlaps the buffers");
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");

size_t ShmSegmentBytes(int size);

}  // namespace trainyard::dist::internal
