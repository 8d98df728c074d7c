// Fused attention on tensor cores for the case that matters for speed: bf16 or f16 storage,
// head size 64 or 128, causal or not. Same contract as Backend::AttentionForward and
// AttentionBackward (backend.h), which call these first and fall back to the scalar kernels of
// attention.cu. Design: Note [Tensor-core attention] in attention_tc.cu. Needs sm_80 or later.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/backend.h"

namespace trainyard::kernels::cuda {

// q: (batch, l, e), k, v: (batch, s, e), out: (batch, l, e) contiguous of `type`; lse (batch, l)
// f32. Returns false, launching nothing, when the case is not one these kernels handle (dtype
// other than bf16/f16, e not 64 or 128, s < 1, a tensor pointer not 16-byte aligned, more than
// 65535 tiles of 64 rows), so the caller falls back to the scalar kernels.
bool AttentionForwardTensorCores(ScalarType type, int64_t batch, int64_t l, int64_t s, int64_t e,
                                 bool causal, double scale, const void* q, const void* k,
                                 const void* v, void* out, float* lse, cudaStream_t stream);

// Shared memory (bytes) per block that these kernels need for `type` and head size e: the
// larger of the forward's and the backward's, or 0 where they do not take the case.
size_t AttentionTensorCoresSmem(ScalarType type, int64_t e);

// From gout (batch, l, e): gq, gk, gv (overwritten), recomputing the probabilities from lse.
// Allocates f32 scratch of batch * l * (e + 1) floats on `stream` (cudaMallocAsync). Returns
// false, launching nothing, in the cases AttentionForwardTensorCores does.
bool AttentionBackwardTensorCores(ScalarType type, int64_t batch, int64_t l, int64_t s, int64_t e,
                                  bool causal, double scale, const void* q, const void* k,
                                  const void* v, const void* out, const float* lse,
                                  const void* gout, void* gq, void* gk, void* gv,
                                  cudaStream_t stream);

}  // namespace trainyard::kernels::cuda
