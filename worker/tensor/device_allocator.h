// DeviceCachingAllocator: device memory for CUDA tensors, one per device.
//
// cudaMalloc and cudaFree synchronise the device and cost tens of microseconds to
// milliseconds, so blocks are kept and reused, as the CPU allocator does (allocator.h): sizes
// are rounded up to a size class (four per power of two, at least 512 bytes) and a freed block
// goes to the free list of its (stream, class) and is handed out again.
//
// Note [Blocks and streams]
// A block belongs to the stream it was allocated on. Work on one stream runs in order, so a
// block freed on the host while kernels on its stream still read it can be handed out again
// for that stream at once: the new user's kernels queue behind the old ones. A block that
// another stream also used (RecordStream: a side stream's all-reduce, a copy stream) is not
// reusable until that stream has passed the point of the free: Free records an event on each
// such stream, and the block waits in `pending` until the events are done.
//
// Out of memory: the cache is given back to the device (after pending events complete) and the
// allocation is tried once more; then ResourceExhausted with the sizes and the statistics.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainyard {

// The raw device operations the allocator needs (the CUDA backend; a fake in tests).
class DeviceRuntime {
 public:
  using Stream = void*;
  using Event = void*;
  virtual ~DeviceRuntime() = default;
  virtual Status Malloc(size_t nbytes, void** out) = 0;
  virtual void Free(void* ptr) = 0;
  virtual Event CreateEvent() = 0;
  virtual void DestroyEvent(Event e) = 0;
  virtual void RecordEvent(Event e, Stream s) = 0;
  virtual bool EventQuery(Event e) = 0;
  virtual void EventSynchronize(Event e) = 0;
};

struct DeviceAllocatorStats {
  int64_t allocated_bytes = 0;       // in blocks handed out now (class sizes)
  int64_t cached_bytes = 0;          // in free or pending blocks kept for reuse
  int64_t reserved_bytes = 0;        // obtained from the device (allocated + cached)
  int64_t peak_allocated_bytes = 0;  // highest allocated_bytes so far
  int64_t peak_reserved_bytes = 0;
  int64_t num_allocs = 0;         // Allocate calls
  int64_t num_device_allocs = 0;  // of which needed fresh device memory
  int64_t num_cache_flushes = 0;  // times the cache was emptied to retry an allocation
};

class DeviceCachingAllocator {
 public:
  using Stream = DeviceRuntime::Stream;

  // `name` ("cuda:0") appears in errors. The runtime must outlive the allocator.
  DeviceCachingAllocator(DeviceRuntime* runtime, std::string name);
  ~DeviceCachingAllocator();  // returns every cached block; blocks still handed out are leaked
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // A block of at least nbytes for work on `stream` (nullptr for 0 bytes).
  StatusOr<void*> Allocate(size_t nbytes, Stream stream);
  // Returns a block from Allocate (null is ignored).
  void Free(void* ptr);
  // Marks `ptr` as also used by `stream` (Note [Blocks and streams]).
  void RecordStream(void* ptr, Stream stream);
  // Returns every free block to the device (waiting for pending ones first).
  void EmptyCache();

  DeviceAllocatorStats Stats() const;
  void ResetPeak();

  // The size class Allocate(nbytes) rounds up to.
  static size_t RoundSize(size_t nbytes);

 private:
  struct Block {
    size_t size = 0;
    Stream stream = nullptr;
    std::vector<Stream> other_streams;  // RecordStream, cleared on reuse
  };
  struct Pending {
    void* ptr;
    std::vector<DeviceRuntime::Event> events;
  };
  using Key = std::pair<Stream, size_t>;

  void* TakeFree(const Key& key);   // mu_ held
  void ProcessPending(bool wait);   // mu_ held
  void ReleaseCache();              // mu_ held
  void NoteAllocated(size_t size);  // mu_ held

  DeviceRuntime* const runtime_;
  const std::string name_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;  // every block from the device, in use or not
  std::map<Key, std::vector<void*>> free_;
  std::vector<Pending> pending_;
  std::vector<DeviceRuntime::Event> spare_events_;
  DeviceAllocatorStats stats_;
};

}  // namespace trainyard
