// The element-wise reductions of the gloo backend (GlooProcessGroup): the functions Gloo's ring
// and our own rings call to combine two buffers, and the division that finishes an average.
// Internal to the backend; compiled only with Gloo (TY_HAVE_GLOO).
#pragma once

#include <cstddef>

#include "worker/dist/process_group.h"
#include "worker/tensor/tensor.h"

namespace trainyard::dist::internal {

// The element-wise reduction Gloo calls: out[i] = a[i] (op) b[i] for n elements; `out` may be
// `a`. 16-bit floats are reduced in float32 and rounded to nearest even. Null for a dtype
// all-reduce does not support. Average reduces as sum (the group divides afterwards).
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);
ReduceFn GetReduceFn(DType dtype, ReduceOp op);

// t /= n in place (the second half of an average). int64 divides and truncates toward zero.
void DivideBy(const Tensor& t, int n);

}  // namespace trainyard::dist::internal
