// Samplers decide the order in which a DataLoader visits the samples of each epoch. The order
// depends only on (seed, epoch), never on the machine, the thread count or earlier epochs, so
// a run resumed at (epoch, position) sees exactly the samples the uninterrupted run would have.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace trainyard::data {

// A sampler has size() positions per epoch, each holding a sample index in
// [0, dataset_size()). Samplers over the whole dataset (Sequential, Random) have
// dataset_size() == size() and visit every sample once; a DistributedSampler visits one
// rank's share, so its size() is smaller than its dataset_size().
class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of positions (samples visited) per epoch.
  virtual int64_t size() const = 0;
  // Number of samples in the dataset the indices point into.
  virtual int64_t dataset_size() const { return size(); }
  // Entries [start, size()) of epoch `epoch`'s order; 0 <= start <= size(). Starting at the
  // position a run reached resumes it exactly.
  std::vector<int64_t> Indices(uint64_t epoch, int64_t start = 0) const;

 protected:
  // The whole order of `epoch`: size() indices in [0, dataset_size()); for a sampler over
  // the whole dataset, a permutation of [0, size()).
  virtual std::vector<int64_t> EpochOrder(uint64_t epoch) const = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }

 protected:
  std::vector<int64_t> EpochOrder(uint64_t epoch) const override;

 private:
  int64_t n_;
};

// A fresh uniform permutation every epoch: RandomPermutation(n, seed, epoch).
class RandomSampler final : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }

 protected:
  std::vector<int64_t> EpochOrder(uint64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// One rank's share of each epoch, as torch.utils.data.DistributedSampler (drop_last=False).
// The epoch's global order is RandomPermutation(n, seed, epoch) when shuffling (exactly
// RandomSampler(n, seed)'s order), else 0, 1, ..., n - 1; it is padded to a multiple of
// world_size by repeating it from its start, and rank r takes global positions r, r + W,
// r + 2W, ... So every rank has size() = ceil(n / W) samples; the ranks' shares are disjoint
// when W divides n, and the padding repeats at most W - 1 samples otherwise.
//
// Note [Strided shards]: with batch b per rank, step s of rank r holds global positions
// r + kW for k in [s b, (s + 1) b), and the union over the ranks is global positions
// [s W b, (s + 1) W b): exactly step s of one process with batch W b over RandomSampler (or
// SequentialSampler). Resuming every rank at position p resumes that process at p W.
class DistributedSampler final : public Sampler {
 public:
  // InvalidArgument unless n >= 1 (and n < 2^33 when shuffling, Note [Permutation stream]),
  // world_size >= 1 and 0 <= rank < world_size.
  static StatusOr<std::unique_ptr<DistributedSampler>> Create(int64_t n, int rank, int world_size,
                                                              bool shuffle, uint64_t seed);

  int64_t size() const override { return (n_ + world_size_ - 1) / world_size_; }
  int64_t dataset_size() const override { return n_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }

 protected:
  std::vector<int64_t> EpochOrder(uint64_t epoch) const override;

 private:
  DistributedSampler(int64_t n, int rank, int world_size, bool shuffle, uint64_t seed)
      : n_(n), rank_(rank), world_size_(world_size), shuffle_(shuffle), seed_(seed) {}

  int64_t n_;
  int rank_;
  int world_size_;
  bool shuffle_;
  uint64_t seed_;
};

// Note [Permutation stream]: a Fisher-Yates shuffle of [0, n) driven by Philox4x32-10 keyed by
// `seed`. Stream s owns counters [s * 2^32, (s + 1) * 2^32); step k of the shuffle uses words
// 2(k % 2) and 2(k % 2) + 1 of counter s * 2^32 + k / 2 as a 64-bit number r, and swaps
// position i with j = floor(r * (i + 1) / 2^64) (bias below n / 2^64). Integer arithmetic
// only, so every machine gets the same permutation. Streams below 2^32 - 1 are epochs;
// stream 2^32 - 1 is reserved for SplitIndices. Needs n < 2^33.
std::vector<int64_t> RandomPermutation(int64_t n, uint64_t seed, uint64_t stream);

// The largest epoch a RandomSampler accepts (see Note [Permutation stream]).
inline constexpr uint64_t kMaxEpoch = (uint64_t{1} << 32) - 2;

// The epoch's order of all n samples that the samplers sharing it among ranks cut up
// (DistributedSampler, ElasticSampler): RandomPermutation(n, seed, epoch) when shuffling
// (exactly RandomSampler(n, seed)'s order), else 0, 1, ..., n - 1.
std::vector<int64_t> GlobalOrder(int64_t n, bool shuffle, uint64_t seed, uint64_t epoch);

// A held-out split of n samples: round(eval_fraction * n) of them, chosen by a seeded
// permutation, are `eval`; the rest `train`. Both lists are sorted. Deterministic in
// (n, eval_fraction, seed). InvalidArgument unless 0 <= eval_fraction < 1.
struct IndexSplit {
  std::vector<int64_t> train;
  std::vector<int64_t> eval;
};
StatusOr<IndexSplit> SplitIndices(int64_t n, double eval_fraction, uint64_t seed);

}  // namespace trainyard::data
