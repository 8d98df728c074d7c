// Storage: one block of memory on one device, shared by every tensor that views it.
// The version counter counts in-place writes through any of those views; autograd compares it
// with the version it saved to detect a tensor changed after being saved for backward.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "worker/tensor/device.h"

namespace trainyard {

class Storage {
 public:
  // Allocates nbytes on `device` from its caching allocator (allocator.h, device_allocator.h;
  // CUDA memory belongs to the device's compute stream). The device must be available; running
  // out of device memory aborts with the sizes (check budgets before allocating).
  Storage(size_t nbytes, Device device);
  // CUDA only: the block belongs to `stream` instead of the compute stream (a copy stream;
  // Note [Blocks and streams] in device_allocator.h).
  Storage(size_t nbytes, Device device, void* stream);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void BumpVersion() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::atomic<uint32_t> version_{0};
};

// Tensor memory on one device, from its caching allocator: in tensors now, obtained from the
// OS or the device in all (in tensors plus cached for reuse), and the most in tensors at any
// moment since the last ResetMemoryPeak. The CPU's is the process's.
struct MemoryStats {
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t peak_allocated_bytes = 0;
};
MemoryStats DeviceMemoryStats(Device device);  // the device must be available
void ResetMemoryPeak(Device device);

}  // namespace trainyard
