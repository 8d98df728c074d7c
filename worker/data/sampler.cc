#include "worker/data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/cpu/philox.h"

namespace trainyard::data {

namespace cpu = kernels::cpu;

std::vector<int64_t> Sampler::Indices(uint64_t epoch, int64_t start) const {
  TY_CHECK(start >= 0 && start <= size())
      << "sampler start position " << start << " is outside [0, " << size() << "]";
  std::vector<int64_t> order = EpochOrder(epoch);
  TY_CHECK_EQ(static_cast<int64_t>(order.size()), size()) << "sampler returned a short epoch";
  order.erase(order.begin(), order.begin() + start);
  return order;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  TY_CHECK(n >= 0) << "sampler size " << n << " is negative";
}

std::vector<int64_t> SequentialSampler::EpochOrder(uint64_t) const {
  std::vector<int64_t> order(n_);
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  TY_CHECK(n >= 0) << "sampler size " << n << " is negative";
}

std::vector<int64_t> RandomSampler::EpochOrder(uint64_t epoch) const {
  TY_CHECK(epoch <= kMaxEpoch) << "epoch " << epoch << " is above the largest, " << kMaxEpoch;
  return RandomPermutation(n_, seed_, epoch);
}

StatusOr<std::unique_ptr<DistributedSampler>> DistributedSampler::Create(int64_t n, int rank,
                                                                         int world_size,
                                                                         bool shuffle,
                                                                         uint64_t seed) {
  if (world_size < 1) {
    return InvalidArgumentError("distributed sampler: world_size is " + std::to_string(world_size) +
                                "; it must be at least 1");
  }
  if (rank < 0 || rank >= world_size) {
    return InvalidArgumentError("distributed sampler: rank " + std::to_string(rank) +
                                " is outside [0, " + std::to_string(world_size) +
                                "); ranks count from 0 to world_size - 1");
  }
  if (n < 1) {
    return InvalidArgumentError("distributed sampler: the dataset has " + std::to_string(n) +
                                " samples; it needs at least 1 to share among the ranks");
  }
  if (shuffle && n >= (int64_t{1} << 33)) {
    return InvalidArgumentError("distributed sampler: " + std::to_string(n) +
                                " samples are too many to shuffle; the limit is 2^33 - 1");
  }
  return std::unique_ptr<DistributedSampler>(
      new DistributedSampler(n, rank, world_size, shuffle, seed));
}

std::vector<int64_t> GlobalOrder(int64_t n, bool shuffle, uint64_t seed, uint64_t epoch) {
  if (shuffle) {
    TY_CHECK(epoch <= kMaxEpoch) << "epoch " << epoch << " is above the largest, " << kMaxEpoch;
    return RandomPermutation(n, seed, epoch);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

std::vector<int64_t> DistributedSampler::EpochOrder(uint64_t epoch) const {
  std::vector<int64_t> global = GlobalOrder(n_, shuffle_, seed_, epoch);
  const int64_t total = size() * world_size_;
  global.reserve(total);
  // Padding from the start, cyclically: position i >= n holds position i - n (i mod n).
  for (int64_t i = n_; i < total; ++i) global.push_back(global[i - n_]);
  std::vector<int64_t> order;
  order.reserve(size());
  for (int64_t i = rank_; i < total; i += world_size_) order.push_back(global[i]);
  return order;
}

std::vector<int64_t> RandomPermutation(int64_t n, uint64_t seed, uint64_t stream) {
  TY_CHECK(n >= 0 && n < (int64_t{1} << 33)) << "permutation size " << n << " is unsupported";
  TY_CHECK(stream < (uint64_t{1} << 32)) << "permutation stream " << stream << " is too large";
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  const uint64_t base = stream << 32;
  cpu::Philox4x32 words{};
  for (int64_t i = n - 1, k = 0; i > 0; --i, ++k) {
    if (k % 2 == 0) words = cpu::Philox(seed, base + static_cast<uint64_t>(k / 2));
    const int w = 2 * static_cast<int>(k % 2);
    const uint64_t r = (uint64_t{words.v[w]} << 32) | words.v[w + 1];
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

StatusOr<IndexSplit> SplitIndices(int64_t n, double eval_fraction, uint64_t seed) {
  TY_CHECK(n >= 0) << "split size " << n << " is negative";
  if (!(eval_fraction >= 0.0 && eval_fraction < 1.0)) {
    return InvalidArgumentError("eval fraction " + std::to_string(eval_fraction) +
                                " must be in [0, 1)");
  }
  constexpr uint64_t kSplitStream = (uint64_t{1} << 32) - 1;
  std::vector<int64_t> order = RandomPermutation(n, seed, kSplitStream);
  const auto n_eval = static_cast<int64_t>(std::llround(eval_fraction * static_cast<double>(n)));
  IndexSplit split;
  split.eval.assign(order.begin(), order.begin() + n_eval);
  split.train.assign(order.begin() + n_eval, order.end());
  std::sort(split.eval.begin(), split.eval.end());
  std::sort(split.train.begin(), split.train.end());
  return split;
}

}  // namespace trainyard::data
