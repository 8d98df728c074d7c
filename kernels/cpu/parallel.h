// A fixed pool of worker threads for CPU kernels. ParallelFor splits [0, n) into contiguous
// chunks of at least `grain` items; the calling thread takes a chunk too and returns when all
// chunks are done. Work smaller than one grain, or a call from inside a pool thread, runs
// inline, so nesting is safe and tiny tensors pay nothing.
//
// The pool size is a setting: SetNumThreads(n), or the TY_NUM_THREADS environment variable,
// default the number of hardware threads. Results never depend on the pool size: kernels
// split work so that every output element is computed by exactly one chunk in a fixed order.
#pragma once

#include <cstdint>
#include <type_traits>

namespace trainyard::kernels::cpu {

int GetNumThreads();
// Resizes the pool (n >= 1) and returns the threads it has now: fewer than n when the system
// refused to start more (a pids cgroup or RLIMIT_NPROC limit). Not to be called while a
// ParallelFor is running.
int SetNumThreads(int n);

namespace internal {
using ChunkFn = void (*)(const void* ctx, int64_t begin, int64_t end);
void ParallelForImpl(int64_t n, int64_t grain, ChunkFn fn, const void* ctx);
bool InParallelRegion();
}  // namespace internal

// fn(begin, end) is called on disjoint ranges that cover [0, n).
template <typename F>
void ParallelFor(int64_t n, int64_t grain, const F& fn) {
  if (n <= 0) return;
  if (n <= grain || internal::InParallelRegion() || GetNumThreads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  internal::ParallelForImpl(
      n, grain, [](const void* ctx, int64_t b, int64_t e) { (*static_cast<const F*>(ctx))(b, e); },
      &fn);
}

// A grain that gives each chunk about `cost_per_chunk` units of work when one item costs
// `cost_per_item` (for instance elements touched).
inline int64_t GrainFor(int64_t cost_per_item, int64_t cost_per_chunk = 32768) {
  if (cost_per_item <= 0) cost_per_item = 1;
  int64_t g = cost_per_chunk / cost_per_item;
  return g < 1 ? 1 : g;
}

}  // namespace trainyard::kernels::cpu
