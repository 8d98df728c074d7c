// Fused attention on tensor cores for the case that matters for speed: bf16 or f16 storage,
// head size 64 or 128, causal or not. Same contract as Backend::AttentionForward and
// AttentionBackward (backend.h), which call these first and fall back to the scalar kernels of
// attention.cu. Design: Note [Tensor-core attention] in attention_tc.cu. Needs sm_80 or later.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/backend.h"

namespace trainyard::kernels::cuda {

// An AttentionTensor (backend.h) as the kernels address it; T is const for inputs.
template <typename T>
struct Operand {
  T* data;
  int64_t outer, inner, row;

  // Row 0 of batch item b.
  __host__ __device__ T* Item(int64_t b, int heads) const {
    return data + b / heads * outer + b % heads * inner;
  }
};

template <typename T>
Operand<T> OperandOf(const AttentionTensor& t) {
  return Operand<T>{static_cast<T*>(t.data), t.outer, t.inner, t.row};
}

// The call's operands as AttentionArgs says. Returns false, launching nothing, when the case
// is not one these kernels handle (dtype other than bf16/f16, e not 64 or 128, s < 1, an
// operand not 16-byte aligned or with a stride that is not a multiple of 8, more than 65535
// tiles of 64 rows), so the caller falls back to the scalar kernels.
bool AttentionForwardTensorCores(const AttentionArgs& args, cudaStream_t stream);

// Shared memory (bytes) per block that these kernels need for `type` and head size e: the
// larger of the forward's and the backward's, or 0 where they do not take the case.
size_t AttentionTensorCoresSmem(ScalarType type, int64_t e);

// Allocates f32 scratch of batch * l * (e + 1) floats on `stream` (cudaMallocAsync). Returns
// false, launching nothing, in the cases AttentionForwardTensorCores does.
bool AttentionBackwardTensorCores(const AttentionArgs& args, cudaStream_t stream);

}  // namespace trainyard::kernels::cuda
