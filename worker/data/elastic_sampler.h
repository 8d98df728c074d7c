// ElasticSampler: one rank's share of the steps of an elastic job (spec::IsElastic), whose
// ranks come and go while the global batch stays the same.
//
// Note [Elastic shards]: a step takes M = world_size x grad_accumulation_steps micro-batches of
// b = batch_size samples from the epoch's global order (RandomPermutation(n, seed, epoch) when
// shuffling, else 0, 1, ..., n - 1): micro-batch j of step s holds global positions
// [(s M + j) b, (s M + j + 1) b). With m ranks, rank r takes micro-batches j = r, r + m, ...
// of every step, in order. So the samples of a step, and the epoch's order of steps, do not
// depend on m: a membership change at any step boundary neither skips nor repeats a sample,
// and the position in the epoch is a function of the step alone (PositionOfStep). An epoch
// has floor(n / (M b)) steps; its last n mod (M b) samples are left out (the spec's
// drop_last for the global batch).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/data/sampler.h"

namespace trainyard::data {

class ElasticSampler final : public Sampler {
 public:
  // InvalidArgument unless n >= 1 (and n < 2^33 when shuffling), batch >= 1,
  // 1 <= world_size <= micro_batches and 0 <= rank < world_size.
  static StatusOr<std::unique_ptr<ElasticSampler>> Create(int64_t n, int64_t batch,
                                                          int64_t micro_batches, int rank,
                                                          int world_size, bool shuffle,
                                                          uint64_t seed);

  int64_t steps_per_epoch() const { return n_ / (micro_batches_ * batch_); }
  // The micro-batches of each step this rank takes: those j in [0, M) with j mod m = rank.
  int64_t rank_micro_batches() const {
    return (micro_batches_ - rank_ + world_size_ - 1) / world_size_;
  }
  // The global index of this rank's i-th micro-batch of a step.
  int64_t MicroBatchIndex(int64_t i) const { return rank_ + i * world_size_; }
  int64_t size() const override { return steps_per_epoch() * rank_micro_batches() * batch_; }
  int64_t dataset_size() const override { return n_; }
  // This rank's position (samples into size()) when `step_in_epoch` steps of the epoch are done.
  int64_t PositionOfStep(int64_t step_in_epoch) const {
    return step_in_epoch * rank_micro_batches() * batch_;
  }

 protected:
  std::vector<int64_t> EpochOrder(uint64_t epoch) const override;

 private:
  ElasticSampler(int64_t n, int64_t batch, int64_t micro_batches, int rank, int world_size,
                 bool shuffle, uint64_t seed)
      : n_(n),
        batch_(batch),
        micro_batches_(micro_batches),
        rank_(rank),
        world_size_(world_size),
        shuffle_(shuffle),
        seed_(seed) {}

  int64_t n_, batch_, micro_batches_;
  int rank_, world_size_;
  bool shuffle_;
  uint64_t seed_;
};

}  // namespace trainyard::data
