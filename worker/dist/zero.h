// ZeroOptimizer: ZeRO stages 1 to 3, optimizer state (and, stage 2, gradients; stage 3, the
// weights too) sharded across the ranks of a data-parallel group.
//
// The Reducer (in shard_gradients mode) reduce-scatters each bucket, leaving rank r the average
// of its chunk r of every bucket. An ordinary Optimizer runs over just those chunks, so moments
// and momentum take 1/N of the memory. Step():
//   1. loads this rank's chunk of the weights into its master chunk per bucket: for stage 1,
//      chunk r of the bucket's gradient buffer (free once reduce-scattered: no copy of the
//      weights is kept between steps); for stage 2, whose reducer keeps no whole buffers
//      (release_buckets, Note [Released buckets]), a chunk of its own (1/N of the weights);
//   2. the inner optimizer updates the chunks (element-wise, so the result equals the
//      unsharded update);
//   3. every bucket's chunks are all-gathered and copied into the parameters (stage 1 into
//      the buckets' buffers, then zeroed; stage 2 into two transient buffers at a time).
// Stage 3's chunks are the weights themselves (ShardedUnits::shard, whose units are the
// buckets): step 1 and 3 fall away, as the units gather their weights when they next run.
//
// Checkpoints do not depend on the world size: StateDict() gathers the full per-parameter state
// in exactly the form an unsharded Optimizer writes (Note [Optimizer state dict]), and
// LoadStateDict() takes that form and keeps this rank's chunks (no communication). StateDict,
// ClipGradNorm and Step are collectives: every rank calls them, in the same order. StateDict
// holds the whole state on every rank for a moment (ranks > 0 drop it: only rank 0 writes).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/dist/reducer.h"
#include "worker/optim/optimizer.h"

namespace trainyard::dist {

class ZeroOptimizer {
 public:
  // Builds the optimizer for a list of named parameters (the trainer's spec -> optimizer).
  using OptimizerFactory =
      std::function<StatusOr<std::unique_ptr<optim::Optimizer>>(std::vector<optim::NamedTensor>)>;

  // `reducer` must be in shard_gradients mode and outlive this object. ZeRO-3 gives
  // `weights`: per bucket, this rank's chunk of the weights (ShardedUnits::shard), which are
  // then the only copy: Step updates them and gathers nothing.
  static StatusOr<std::unique_ptr<ZeroOptimizer>> Create(Reducer* reducer,
                                                         const OptimizerFactory& make,
                                                         std::vector<Tensor> weights = {});

  Status Step();
  // Drops this step's gradients without updating (fp16's loss scaler found an inf or NaN).
  void SkipStep();
  // Per bucket, the chunk the inner optimizer updates; its .grad is the bucket's averaged shard
  // (what an fp16 loss scaler unscales and checks).
  const std::vector<Tensor>& masters() const { return masters_; }
  double lr() const { return inner_->lr(); }
  void set_lr(double lr) { inner_->set_lr(lr); }

  // torch.nn.utils.clip_grad_norm_ over the whole model's averaged gradients (2-norm): returns
  // the total norm before clipping and scales this rank's gradient chunks when it exceeds
  // max_norm.
  StatusOr<double> ClipGradNorm(double max_norm);

  // See the top of this file.
  StatusOr<std::vector<optim::NamedTensor>> StateDict();
  Status LoadStateDict(const std::vector<optim::NamedTensor>& state);

  // Bytes of optimizer state on this rank: the inner optimizer's buffers (ZeRO-2: and the
  // master chunks of the weights).
  int64_t state_bytes() const;
  const optim::Optimizer& inner() const { return *inner_; }

 private:
  ZeroOptimizer(Reducer* reducer, std::vector<Tensor> masters, bool sharded_weights)
      : reducer_(reducer), masters_(std::move(masters)), sharded_weights_(sharded_weights) {}
  Status GatherWeights();

  Reducer* reducer_;
  std::vector<Tensor> masters_;  // per bucket: this rank's chunk of the weights, 1-D
  const bool sharded_weights_;   // ZeRO-3: masters_ are the weights' only copy
  std::unique_ptr<optim::Optimizer> inner_;
};

// Bytes held by an optimizer's state (its buffers; parameters are not counted).
int64_t OptimizerStateBytes(const optim::Optimizer& optimizer);

}  // namespace trainyard::dist
