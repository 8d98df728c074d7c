#include "worker/tensor/allocator.h"

#include <cstdio>
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

namespace {

// Returns every cached block to the system (before a failed allocation is retried).
void ReleaseCached(CpuAllocator::Impl* m) {
  std::lock_guard<std::mutex> lock(m->mu);
  for (auto& list : m->free_lists) {
    for (void* block : list) std::free(block);
    m->stats.reserved_bytes -= m->stats.cached_bytes;
    m->stats.cached_bytes = 0;
    list.clear();
  }
}

// The process cannot go on: says so, with what was asked and what is in use, and exits 1 (an
// abort would dump core and name no cause; tensors have no error path for this).
[[noreturn]] void OutOfMemory(size_t size, CpuAllocator::Impl* m) {
  int64_t in_use = 0;
  {
    std::lock_guard<std::mutex> lock(m->mu);
    in_use = m->stats.allocated_bytes - static_cast<int64_t>(size);
  }
  std::fprintf(stderr,
               "error: out of memory: allocating %.1f MiB on the cpu failed with %.1f MiB of "
               "tensors in use; the job needs more memory than this process may have: lower "
               "batch_size, the model's size or context, or use a machine with more memory\n",
               static_cast<double>(size) / (1 << 20), static_cast<double>(in_use) / (1 << 20));
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

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
  if (p == nullptr) {
    ReleaseCached(m);
    p = std::aligned_alloc(kAlign, size);
  }
  if (p == nullptr) OutOfMemory(size, m);
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
