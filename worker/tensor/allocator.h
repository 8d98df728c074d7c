// The CPU caching allocator. Blocks are 64-byte aligned and rounded up to a size class (four
// classes per power of two, so at most 25% slack). A freed block goes back to its class's free
// list and is handed out again; memory is kept for the life of the process and never returned
// to the OS, because re-faulting fresh pages (about 14 us per 4 KiB page here) can cost a
// training step as much as its arithmetic. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainyard {

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // in blocks handed out now (class sizes)
  int64_t cached_bytes = 0;          // in free blocks kept for reuse
  int64_t peak_allocated_bytes = 0;  // highest allocated_bytes so far
  int64_t reserved_bytes = 0;        // obtained from the OS in all (allocated + cached)
  int64_t num_allocs = 0;            // Allocate calls
  int64_t num_os_allocs = 0;         // of which needed fresh memory from the OS
};

class CpuAllocator {
 public:
  // The process-wide allocator.
  static CpuAllocator& Get();

  // Returns a block of at least `nbytes` (nullptr for 0). When the OS has no memory left, even
  // after the cache is returned to it, says so on stderr (the size asked for, the tensors in
  // use, what to change) and exits the process with code 1.
  void* Allocate(size_t nbytes);
  // Returns a block from Allocate(nbytes) to the cache.
  void Free(void* ptr, size_t nbytes);

  AllocatorStats Stats() const;
  void ResetPeak();

  struct Impl;  // allocator.cc's; opaque here

  // The size class Allocate(nbytes) rounds up to.
  static size_t RoundSize(size_t nbytes);

 private:
  CpuAllocator() = default;
  Impl* impl();
};

}  // namespace trainyard
