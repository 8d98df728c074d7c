#include "worker/tensor/device_allocator.h"

#include <algorithm>

#include "worker/tensor/allocator.h"

namespace trainyard {
namespace {

constexpr size_t kMinBlock = 512;

std::string MiB(int64_t bytes) {
  return std::to_string(bytes / (1 << 20)) + "." + std::to_string(bytes % (1 << 20) * 10 >> 20) +
         " MiB";
}

}  // namespace

DeviceCachingAllocator::DeviceCachingAllocator(DeviceRuntime* runtime, std::string name)
    : runtime_(runtime), name_(std::move(name)) {}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseCache();
  for (DeviceRuntime::Event e : spare_events_) runtime_->DestroyEvent(e);
}

size_t DeviceCachingAllocator::RoundSize(size_t nbytes) {
  return CpuAllocator::RoundSize(std::max(nbytes, kMinBlock));
}

StatusOr<void*> DeviceCachingAllocator::Allocate(size_t nbytes, Stream stream) {
  if (nbytes == 0) return static_cast<void*>(nullptr);
  // No device holds 4 EiB; above that, rounding up to a size class could wrap to 0.
  if (nbytes > (size_t{1} << 62)) {
    return ResourceExhaustedError(name_ + ": cannot allocate " + std::to_string(nbytes) + " bytes");
  }
  const size_t size = RoundSize(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.num_allocs;
  ProcessPending(/*wait=*/false);
  if (void* p = TakeFree({stream, size})) return p;
  void* p = nullptr;
  Status s = runtime_->Malloc(size, &p);
  if (!s.ok() && s.code() == StatusCode::kResourceExhausted && stats_.cached_bytes > 0) {
    ++stats_.num_cache_flushes;
    ReleaseCache();
    s = runtime_->Malloc(size, &p);
  }
  if (!s.ok()) {
    return Status(s.code(), name_ + ": out of memory allocating " + MiB(size) + " (" +
                                MiB(stats_.allocated_bytes) + " allocated by tensors, " +
                                MiB(stats_.reserved_bytes) + " reserved): " + s.message() +
                                "; use a smaller batch size or bf16 precision");
  }
  blocks_[p] = Block{size, stream, {}};
  ++stats_.num_device_allocs;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  NoteAllocated(size);
  return p;
}

void DeviceCachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  TY_CHECK(it != blocks_.end()) << name_ << ": Free of a pointer this allocator never returned";
  Block& b = it->second;
  stats_.allocated_bytes -= static_cast<int64_t>(b.size);
  stats_.cached_bytes += static_cast<int64_t>(b.size);
  if (b.other_streams.empty()) {
    free_[{b.stream, b.size}].push_back(ptr);
    return;
  }
  Pending p{ptr, {}};
  for (Stream s : b.other_streams) {
    DeviceRuntime::Event e = spare_events_.empty() ? runtime_->CreateEvent() : spare_events_.back();
    if (!spare_events_.empty()) spare_events_.pop_back();
    runtime_->RecordEvent(e, s);
    p.events.push_back(e);
  }
  b.other_streams.clear();
  pending_.push_back(std::move(p));
}

void DeviceCachingAllocator::RecordStream(void* ptr, Stream stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  TY_CHECK(it != blocks_.end()) << name_ << ": RecordStream of an unknown pointer";
  Block& b = it->second;
  if (stream == b.stream) return;
  if (std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end())
    b.other_streams.push_back(stream);
}

void DeviceCachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseCache();
}

DeviceAllocatorStats DeviceCachingAllocator::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DeviceCachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void* DeviceCachingAllocator::TakeFree(const Key& key) {
  auto it = free_.find(key);
  if (it == free_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  stats_.cached_bytes -= static_cast<int64_t>(key.second);
  NoteAllocated(key.second);
  return p;
}

void DeviceCachingAllocator::ProcessPending(bool wait) {
  auto done = [&](Pending& p) {
    for (DeviceRuntime::Event e : p.events) {
      if (wait) {
        runtime_->EventSynchronize(e);
      } else if (!runtime_->EventQuery(e)) {
        return false;
      }
    }
    for (DeviceRuntime::Event e : p.events) spare_events_.push_back(e);
    const Block& b = blocks_.at(p.ptr);
    free_[{b.stream, b.size}].push_back(p.ptr);
    return true;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), done), pending_.end());
}

void DeviceCachingAllocator::ReleaseCache() {
  ProcessPending(/*wait=*/true);
  for (auto& [key, ptrs] : free_) {
    for (void* p : ptrs) {
      runtime_->Free(p);
      blocks_.erase(p);
      stats_.cached_bytes -= static_cast<int64_t>(key.second);
      stats_.reserved_bytes -= static_cast<int64_t>(key.second);
    }
  }
  free_.clear();
}

void DeviceCachingAllocator::NoteAllocated(size_t size) {
  stats_.allocated_bytes += static_cast<int64_t>(size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
}

}  // namespace trainyard
