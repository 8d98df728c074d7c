#include "worker/data/elastic_sampler.h"

namespace trainyard::data {

StatusOr<std::unique_ptr<ElasticSampler>> ElasticSampler::Create(int64_t n, int64_t batch,
                                                                 int64_t micro_batches, int rank,
                                                                 int world_size, bool shuffle,
                                                                 uint64_t seed) {
  if (n < 1 || (shuffle && n >= (int64_t{1} << 33))) {
    return InvalidArgumentError("elastic sampler: " + std::to_string(n) +
                                " samples; expected 1 to 2^33 - 1");
  }
  if (batch < 1 || micro_batches < 1) {
    return InvalidArgumentError("elastic sampler: batch " + std::to_string(batch) + " x " +
                                std::to_string(micro_batches) +
                                " micro-batches; both must be at least 1");
  }
  if (world_size < 1 || world_size > micro_batches || rank < 0 || rank >= world_size) {
    return InvalidArgumentError(
        "elastic sampler: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
        "; expected 0 <= rank < world size <= " + std::to_string(micro_batches) +
        " (the micro-batches of a step)");
  }
  return std::unique_ptr<ElasticSampler>(
      new ElasticSampler(n, batch, micro_batches, rank, world_size, shuffle, seed));
}

std::vector<int64_t> ElasticSampler::EpochOrder(uint64_t epoch) const {
  const std::vector<int64_t> global = GlobalOrder(n_, shuffle_, seed_, epoch);
  std::vector<int64_t> order;
  order.reserve(size());
  for (int64_t s = 0; s < steps_per_epoch(); ++s) {
    for (int64_t j = rank_; j < micro_batches_; j += world_size_) {
      const int64_t first = (s * micro_batches_ + j) * batch_;
      order.insert(order.end(), global.begin() + first, global.begin() + first + batch_);
    }
  }
  return order;
}

}  // namespace trainyard::data
