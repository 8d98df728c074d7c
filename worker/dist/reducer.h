// Reducer: averages gradients across the ranks of a ProcessGroup while backward still runs
// (data parallelism, DESIGN.md section 4; PyTorch's DDP reducer is the model).
//
//   Create       packs the parameters into buckets (Note [Bucket order]; a bucket holds one
//                dtype); each bucket owns one flat buffer and every parameter's .grad becomes a
//                view into it, so backward accumulates straight into what the collective sends.
//   backward     a post-accumulate hook marks a parameter ready; when every parameter of a
//                bucket is ready and every earlier bucket has been launched, its all-reduce
//                starts at once (asynchronously), overlapping the rest of backward.
//   Finish       after backward: launches what is left (unused parameters), waits for every
//                bucket and leaves the average over ranks in each .grad (with shard_gradients,
//                in each bucket's `shard` instead; .grad keeps this rank's own gradient).
//
// Every rank must run the same model, so buckets are identical and launched in the same order.
// With `sync` off (gradient accumulation over micro-batches, PyTorch's no_sync) hooks do nothing
// and gradients accumulate locally; the next synchronised backward reduces the sum.
//
// Note [Bucket order]: parameters go into buckets in reverse order of registration, which is
// roughly the order backward produces their gradients (the last layer's first). The first bucket
// is small (first_bucket_bytes) so communication starts early; the rest hold up to bucket_bytes.
// A parameter larger than a bucket gets one of its own. Each bucket's buffer is padded to a
// multiple of the world size so it can also be reduce-scattered (ZeRO-1).
//
// Note [Released buckets]: with release_buckets (ZeRO-2) a bucket's buffer is made when the
// first of its gradients arrives (that gradient is copied in; the others then accumulate
// straight into their views) and dropped, with its parameters' .grad, as soon as its
// reduce-scatter is done and folded into the shard. At most kLiveBuckets launched buffers are
// kept: launching one more first waits for the oldest. So a rank holds its shards, the buckets
// being filled (usually one; two where an op's gradients straddle a boundary; more only where
// gradients arrive far from bucket order) and a few in flight, never the whole gradient.
//
// Thread safety: hooks run on the thread running backward; Finish and Prepare on the caller's.
// One backward at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/dist/process_group.h"
#include "worker/tensor/tensor.h"

namespace trainyard::dist {

using NamedTensor = std::pair<std::string, Tensor>;

// release_buckets: launched buckets whose buffers may be alive at once (Note [Released buckets]).
inline constexpr size_t kLiveBuckets = 2;

struct ReducerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  int64_t first_bucket_bytes = int64_t{1} << 20;
  // When false, a parameter that gets no gradient in a step (its micro-batches, no_sync ones
  // included) is an error naming it; when true, such parameters are reduced at the end (their
  // gradient counts as zero on this rank) and parameters no rank used keep no gradient (.grad
  // undefined), as in one process. Either way every bucket is still reduced, so no peer waits.
  bool find_unused_parameters = false;
  // The dtype gradients travel in when not their own: bfloat16 or float16 (nullopt: as they
  // are). Gradients are divided by the world size before rounding, so the sum cannot overflow
  // where the average would not.
  std::optional<DType> compression;
  // ZeRO-1: reduce-scatter each bucket instead of all-reducing it; afterwards only this rank's
  // shard of each bucket (Bucket::shard) holds averaged gradients.
  bool shard_gradients = false;
  // ZeRO-2 (with shard_gradients): no whole gradient outlives its bucket's reduce-scatter
  // (Note [Released buckets]). Every backward reduces (set_sync(false) is ignored) and adds
  // into the shards, which ClearShards() starts afresh.
  bool release_buckets = false;
  // The buckets, as indices into the parameters (each exactly once), in launch order; empty:
  // by size (Note [Bucket order]). ZeRO-3 gives its units, the last first.
  std::vector<std::vector<size_t>> plan;
  // Called on the backward thread right after bucket b's collective is issued: every gradient
  // of its parameters is in (ZeRO-3 releases the unit's weights).
  std::function<void(size_t bucket)> on_launch;
};

// One bucket: a run of parameters sharing a flat buffer.
struct Bucket {
  std::vector<size_t> params;    // indices into the reducer's parameter list, in bucket order
  std::vector<int64_t> offsets;  // element offset of each parameter in `buffer`
  Tensor buffer;                 // 1-D, `padded` elements; release_buckets: only while in use
  Tensor shard;                  // shard_gradients: this rank's averaged chunk of `buffer`
  int64_t numel = 0;             // elements before padding
  int64_t padded = 0;            // numel rounded up to a multiple of the world size
};

// Per synchronised step, for metrics and the overlap test (release_buckets: summed over the
// step's micro-batches, each of which reduces). Times are steady-clock.
struct ReducerStats {
  std::chrono::steady_clock::time_point first_launch{};  // first bucket's collective queued
  std::chrono::steady_clock::time_point first_start{};   // ... began running
  std::chrono::steady_clock::time_point backward_end{};  // Finish was called
  std::chrono::steady_clock::time_point last_end{};      // the last collective completed
  double comm_seconds = 0;  // sum over buckets of collective running time
  double wait_seconds = 0;  // time Finish spent waiting for buckets after backward
  // bytes/s, NCCL's convention: size * 2(n-1)/n / time (all-reduce), (n-1)/n (reduce-scatter)
  double bus_bandwidth = 0;
  int64_t bytes = 0;  // bytes reduced (in the compressed dtype)
  int buckets_launched_in_backward = 0;
};

class Reducer {
 public:
  // `params`: the model's named parameters (leaves requiring grad, contiguous, floating, all on
  // one device: the CPU for Gloo, the rank's GPU for NCCL).
  static StatusOr<std::unique_ptr<Reducer>> Create(std::vector<NamedTensor> params,
                                                   std::shared_ptr<ProcessGroup> group,
                                                   ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Off: the next backwards accumulate locally without communicating (no_sync).
  void set_sync(bool sync);
  bool sync() const;

  // Call before a synchronised backward: resets readiness and points every .grad at its bucket
  // view (copying a gradient that lives elsewhere into it; zeroing an undefined one).
  void Prepare();
  // Call after a synchronised backward: launches the rest, waits (bounded by the group's
  // timeout) and averages. Errors name the collective or the parameters without gradients.
  Status Finish();
  // release_buckets: the next backward's reduce-scatters overwrite the shards (a new step)
  // instead of adding to them (the step's further micro-batches).
  void ClearShards();

  const std::vector<Bucket>& buckets() const;
  const std::vector<NamedTensor>& params() const;
  const ReducerOptions& options() const;
  // The most bytes of buffers and shards held at once (release_buckets: the shards and the
  // buckets alive at the busiest moment; compressed copies in flight are not counted).
  int64_t peak_gradient_bytes() const;
  const ReducerStats& stats() const;  // of the last Finish
  // The collective of `bucket` in the current synchronised backward; null until launched.
  std::shared_ptr<Work> work(size_t bucket) const;
  ProcessGroup& group() const;

  class State;

 private:
  explicit Reducer(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;  // hooks hold weak references, so they outlive us safely
};

// The bytes of a tensor's elements (0 when undefined).
int64_t BytesOf(const Tensor& t);

// Makes every rank's tensors equal to rank 0's (parameters and buffers at start-up).
Status BroadcastFromRank0(ProcessGroup& group, const std::vector<NamedTensor>& tensors);

// Element ranges of buckets for tests and ZeRO: the bucket layout Create would choose.
std::vector<std::vector<size_t>> PlanBuckets(const std::vector<NamedTensor>& params,
                                             int64_t first_bucket_bytes, int64_t bucket_bytes);

}  // namespace trainyard::dist
