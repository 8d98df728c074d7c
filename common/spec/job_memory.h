// The memory one rank of a job needs, estimated from its spec alone, so that a spec that cannot
// fit is refused when it is validated instead of being OOM-killed mid-run. Pure arithmetic over
// spec::JobSpec: the coordinator uses it and never links the engine.
//
//   spec::MemoryEstimate m = spec::EstimateRankMemory(spec, /*vocab_size=*/256);
//   if (m.total_bytes() > worker_memory) return ResourceExhaustedError(... + m.Describe());
//
// Parameters, weights, gradients and optimizer state are exact: they are what nn::BuildModel,
// the Reducer's buckets and the optimizers allocate (ZeRO-1 included). Activations are a model
// of the engine's peak (Note [Activation model] in job_memory.cc), within 0.87 to 1.07 of the
// CPU allocator's measured peak for the zoo's models (tests/worker/trainer/job_memory_test.cc);
// on CUDA the same model with 16-bit autocast tensors, not measured there. Every count
// saturates at INT64_MAX instead of overflowing.
#pragma once

#include <cstdint>
#include <string>

#include "common/spec/job_spec.h"

namespace trainyard::spec {

// Bytes of tensor memory on one rank's training device (the host for device "cpu"). Not counted:
// the process itself, kernel scratch outside tensors (im2col buffers, BLAS workspaces), batches
// the data loader prefetches beyond the one in use, and the caching allocator's rounding (blocks
// are rounded up to a quarter of a power of two: at most 25% more).
struct MemoryEstimate {
  int64_t parameters = 0;     // trainable parameters (tied weights once)
  int64_t weights_bytes = 0;  // fp32 weights, and batch norm's running statistics
  // fp32 gradients; data parallel: the Reducer's buckets, padded to a multiple of the world size
  // (plus ZeRO's averaged shard and, with grad_compression, the compressed copies in flight;
  // ZeRO-2: only the buckets alive at once).
  int64_t gradients_bytes = 0;
  // This rank's optimizer state (ZeRO: its 1/world_size share; ZeRO-2 adds its master chunk of
  // the weights).
  int64_t optimizer_bytes = 0;
  // What one micro-batch's forward keeps for backward, at its peak during backward (the batch,
  // saved tensors, autocast's copies, gradients in flight); or evaluation's peak, if higher.
  int64_t activations_bytes = 0;

  std::string optimizer;  // "adamw", "sgd with momentum", ...: for Describe
  std::string batch;      // "batch 32 x context 128", "batch 64": for Describe

  // The sum of the four byte counts (saturating).
  int64_t total_bytes() const;
  // "about 61.2 GiB per rank: weights 18.6 GiB, gradients 18.6 GiB, optimizer state 37.3 GiB
  // (adamw), activations 1.2 GiB (batch 32 x context 128)"
  std::string Describe() const;
};

// The estimate for one rank of `spec` (as ParseJobSpec returns it: validated, defaults filled).
// vocab_size: the vocabulary when the spec leaves model.gpt.vocab_size at 0 (the data decides;
// pass 256 for unknown text, the token file's when known); ignored otherwise.
MemoryEstimate EstimateRankMemory(const JobSpec& spec, int64_t vocab_size);

// "812.0 MiB", "1.2 GiB", "more than 8 EiB" for INT64_MAX (a saturated count).
std::string FormatBytes(int64_t bytes);

}  // namespace trainyard::spec
