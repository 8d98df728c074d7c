#include "worker/tensor/allocator.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/check.h"

namespace trainyard {
namespace {

constexpr size_t kAlign = 64;
constexpr int kClasses = 4 * 64;

// Class index of a rounded size: 4 classes per power of two.
int ClassIndex(size_t rounded) {
  int lg = 63 - __builtin_clzll(rounded);
  size_t sub = lg >= 2 ? (rounded >> (lg - 2)) & 3 : 0;
  return lg * 4 + static_cast<int>(sub);
}

}  // namespace

struct CpuAllocator::Impl {
  mutable std::mutex mu;
  std::vector<void*> free_lists[kClasses];
  AllocatorStats stats;
};

CpuAllocator& CpuAllocator::Get() {
  static CpuAllocator* allocator = new CpuAllocator();  // never destroyed: tensors may outlive
  return *allocator;
}

CpuAllocator::Impl* CpuAllocator::impl() {
  static Impl* impl = new Impl();
  return impl;
}

size_t CpuAllocator::RoundSize(size_t nbytes) {
  if (nbytes <= kAlign) return kAlign;
  int lg = 63 - __builtin_clzll(nbytes - 1);  // nbytes - 1 < 2^(lg+1)
  // Quarter steps of the power of two below, but whole alignment units (aligned_alloc wants a
  // multiple of the alignment).
  size_t step = size_t{1} << (lg - 2);
  if (step < kAlign) step = kAlign;
  return (nbytes + step - 1) & ~(step - 1);
}

void* CpuAllocator::Allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = RoundSize(nbytes);
  const int cls = ClassIndex(size);
  Impl* m = impl();
  {
    std::lock_guard<std::mutex> lock(m->mu);
    ++m->stats.num_allocs;
    m->stats.allocated_bytes += static_cast<int64_t>(size);
    if (m->stats.allocated_bytes > m->stats.peak_allocated_bytes)
      m->stats.peak_allocated_bytes = m->stats.allocated_bytes;
    auto& list = m->free_lists[cls];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      m->stats.cached_bytes -= static_cast<int64_t>(size);
      return p;
    }
    ++m->stats.num_os_allocs;
    m->stats.reserved_bytes += static_cast<int64_t>(size);
  }
  void* p = std::aligned_alloc(kAlign, size);
  TY_CHECK(p != nullptr) << "out of memory allocating " << size << " bytes on cpu";
  return p;
}

void CpuAllocator::Free(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  const size_t size = RoundSize(nbytes);
  Impl* m = impl();
  std::lock_guard<std::mutex> lock(m->mu);
  m->free_lists[ClassIndex(size)].push_back(ptr);
  m->stats.allocated_bytes -= static_cast<int64_t>(size);
  m->stats.cached_bytes += static_cast<int64_t>(size);
}

AllocatorStats CpuAllocator::Stats() const {
  Impl* m = const_cast<CpuAllocator*>(this)->impl();
  std::lock_guard<std::mutex> lock(m->mu);
  return m->stats;
}

void CpuAllocator::ResetPeak() {
  Impl* m = impl();
  std::lock_guard<std::mutex> lock(m->mu);
  m->stats.peak_allocated_bytes = m->stats.allocated_bytes;
}

}  // namespace trainyard
