// Strided iteration over up to kMaxOperands arrays that share one iteration shape. Operand 0 is
// usually the output. Strides are in elements; a stride of 0 broadcasts. Dimensions are
// coalesced (merged where every operand is contiguous across them, dropped where size is 1), so
// most loops end up as one long inner loop that the caller can vectorise.
#pragma once

#include <cstdint>

#include "kernels/cpu/parallel.h"

namespace trainyard::kernels::cpu {

constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 4;

struct StridedIter {
  int ndim = 0;                  // dims after coalescing (0 means one element)
  int nops = 0;                  // operands in use
  int64_t sizes[kMaxDims] = {};  // outermost first
  int64_t strides[kMaxOperands][kMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
  int64_t inner_size() const { return ndim == 0 ? 1 : sizes[ndim - 1]; }
  int64_t inner_stride(int op) const { return ndim == 0 ? 0 : strides[op][ndim - 1]; }
};

// Builds a coalesced iterator. sizes: `ndim` entries; strides[op]: `ndim` entries each.
StridedIter MakeIter(int ndim, const int64_t* sizes, int nops, const int64_t* const* strides);

// Calls fn(offsets, n) for every inner run, where offsets[op] is the element offset of the
// run's first element for each operand and n the run length (the inner stride of each operand
// is iter.inner_stride(op)). Runs are split across the pool; `cost_per_element` sizes chunks.
template <typename F>
void ForEachRun(const StridedIter& it, int64_t cost_per_element, const F& fn) {
  const int64_t inner = it.inner_size();
  const int64_t outer = inner == 0 ? 0 : it.numel() / inner;
  if (outer == 0) return;
  if (outer == 1) {
    // One long run: split it across threads.
    int64_t offs0[kMaxOperands] = {};
    ParallelFor(inner, GrainFor(cost_per_element), [&](int64_t b, int64_t e) {
      int64_t offs[kMaxOperands];
      for (int op = 0; op < it.nops; ++op) offs[op] = offs0[op] + b * it.inner_stride(op);
      fn(offs, e - b);
    });
    return;
  }
  ParallelFor(outer, GrainFor(cost_per_element * inner), [&](int64_t b, int64_t e) {
    // Unravel b into a counter over the outer dims, then step it.
    int64_t idx[kMaxDims] = {};
    int64_t rem = b;
    for (int d = it.ndim - 2; d >= 0; --d) {
      idx[d] = rem % it.sizes[d];
      rem /= it.sizes[d];
    }
    int64_t offs[kMaxOperands];
    for (int op = 0; op < it.nops; ++op) {
      offs[op] = 0;
      for (int d = 0; d < it.ndim - 1; ++d) offs[op] += idx[d] * it.strides[op][d];
    }
    for (int64_t i = b; i < e; ++i) {
      fn(offs, inner);
      for (int d = it.ndim - 2; d >= 0; --d) {
        for (int op = 0; op < it.nops; ++op) offs[op] += it.strides[op][d];
        if (++idx[d] < it.sizes[d]) break;
        for (int op = 0; op < it.nops; ++op) offs[op] -= it.sizes[d] * it.strides[op][d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace trainyard::kernels::cpu
