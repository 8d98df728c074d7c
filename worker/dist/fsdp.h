// ShardedUnits: ZeRO-3 (fully sharded data parallelism), parameters sharded by unit across the
// ranks of a group. docs/design/010-zero-and-pipeline.md.
//
// A unit is a list of parameters: a GPT block, an MLP layer, and the root (what no other unit
// holds: embeddings, the last norm; unit 0). Its parameters are laid out as one flat buffer
// padded to a multiple of the world size, in the order given, exactly as the Reducer lays out
// a bucket of the same parameters (ReducerOptions::plan), so chunk r of a unit's gradient
// bucket and chunk r of its weights line up. Between uses, rank r keeps chunk r of the weights
// (shard(u): the master copy, which ZeroOptimizer updates) and no other weight memory:
//   Gather(u)    all-gathers the chunks into a fresh flat buffer and points each parameter of
//                the unit into it (its TensorImpl's storage, so the model's handles,
//                autograd's saved tensors and the reducer all see it);
//   Release(u)   points them at an empty storage, which frees the flat buffer;
//   Prefetch(u)  starts Gather(u)'s all-gather, which Gather then only waits for.
//
// Note [Unit wrappers]: ZeRO-3's DataParallel runs each unit's forward through RunUnit (as the
// unit module's forward wrapper, nn::Module::set_forward_wrapper), which gathers the unit and
// prefetches the next one in
// forward order (units 1, 2, ... after the root), then registers a hook on the output's
// gradient that gathers the unit again before its backward (prefetching the next one in
// backward order: the last unit after the root, then downwards), and releases the unit. The
// reducer's on_launch releases a unit once all its gradients are in (ZeRO-3's
// DataParallel). A GPT block checkpointed in backward recomputes inside the wrapper's hook, so
// it finds its parameters gathered.
//
// Autograd checks that a tensor saved for backward is unmodified by its storage's version: a
// gathered buffer is a new storage, whose version (one all-gather) is the same at every
// gather, so a parameter saved in forward and gathered again for backward passes.
//
// Every rank must gather in the same order (the collectives are ordered): the wrappers do,
// as every rank runs the same model. A failed gather leaves the unit's buffer as it is and
// keeps the error (TakeError), which the trainer reports after the backward or the
// evaluation. Checkpoints gather one unit at a time (DataParallel::GatheredCopy).
//
// Unshard ends it all: the model is whole again (the trainer's last act). Not thread-safe: the
// training thread and its backward (the same thread on every backend here) call it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/dist/process_group.h"
#include "worker/dist/reducer.h"

namespace trainyard::dist {

class ShardedUnits {
 public:
  // `units[u]`: indices into `params` (every parameter in exactly one unit; unit 0 the root).
  // The parameters hold the same weights on every rank (broadcast first); on return each unit
  // is released and this rank keeps its chunks.
  static StatusOr<std::unique_ptr<ShardedUnits>> Create(std::vector<NamedTensor> params,
                                                        std::vector<std::vector<size_t>> units,
                                                        std::shared_ptr<ProcessGroup> group);

  // Every rank together, at the end of training: each parameter gets its gathered weights in a
  // storage of its own, so the model is whole again; Gather, Prefetch and Release then do
  // nothing.
  Status Unshard();

  // `forward(x)`, unit u's computation, as Note [Unit wrappers] says.
  using Computation = std::function<Tensor(const Tensor&)>;
  Tensor RunUnit(size_t unit, const Tensor& x, const Computation& forward);

  Status Gather(size_t unit);
  void Prefetch(size_t unit);
  void Release(size_t unit);

  size_t size() const { return units_.size(); }
  const std::vector<size_t>& unit(size_t u) const { return units_[u].params; }
  // This rank's chunk of unit u's flat weights (1-D, padded / world elements).
  const Tensor& shard(size_t u) const { return units_[u].shard; }
  // The first failure of a gather since the last call (OK when none); clears it.
  Status TakeError();
  // The most bytes of gathered weights held at once.
  int64_t peak_gathered_bytes() const { return peak_bytes_; }

 private:
  struct Unit {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // in the flat layout
    int64_t padded = 0;
    Tensor shard;
    Tensor full;                    // gathered (or being gathered) flat weights; else undefined
    std::shared_ptr<Work> pending;  // a prefetch in flight
  };
  ShardedUnits(std::vector<NamedTensor> params, std::shared_ptr<ProcessGroup> group)
      : params_(std::move(params)), group_(std::move(group)) {}
  void PointInto(size_t unit, const Tensor& flat);  // the unit's parameters into `flat`

  std::vector<NamedTensor> params_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<Unit> units_;
  std::shared_ptr<Storage> empty_;  // what released parameters point at
  Status error_;
  bool unsharded_ = false;
  int64_t held_bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace trainyard::dist
