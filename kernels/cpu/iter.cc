#include "kernels/cpu/iter.h"

#include "common/check.h"

namespace trainyard::kernels::cpu {

StridedIter MakeIter(int ndim, const int64_t* sizes, int nops, const int64_t* const* strides) {
  TY_CHECK(ndim <= kMaxDims && nops <= kMaxOperands) << ndim << " dims, " << nops << " operands";
  StridedIter it;
  it.nops = nops;
  // Drop size-1 dims (their strides never matter). An empty tensor keeps a 0-size dim.
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 1) continue;
    it.sizes[it.ndim] = sizes[d];
    for (int op = 0; op < nops; ++op) it.strides[op][it.ndim] = strides[op][d];
    ++it.ndim;
  }
  // Merge dim d into d+1 when, for every operand, stepping d equals stepping d+1 size times.
  int out = 0;
  for (int d = 1; d < it.ndim; ++d) {
    bool merge = true;
    for (int op = 0; op < nops && merge; ++op)
      merge = it.strides[op][out] == it.strides[op][d] * it.sizes[d];
    if (merge) {
      it.sizes[out] *= it.sizes[d];
      for (int op = 0; op < nops; ++op) it.strides[op][out] = it.strides[op][d];
    } else {
      ++out;
      it.sizes[out] = it.sizes[d];
      for (int op = 0; op < nops; ++op) it.strides[op][out] = it.strides[op][d];
    }
  }
  if (it.ndim > 0) it.ndim = out + 1;
  return it;
}

}  // namespace trainyard::kernels::cpu
