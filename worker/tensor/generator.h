// Generator: a seed and a counter offset for Philox (kernels/cpu/philox.h). Each draw reserves
// the counters it needs, so draws are reproducible from (seed, offset) and independent of the
// thread count. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace trainyard {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_.load(); }
  uint64_t offset() const { return offset_.load(); }
  // Sets the seed and restarts the counter.
  void ManualSeed(uint64_t seed) {
    seed_.store(seed);
    offset_.store(0);
  }
  // Restores a state saved as (seed, offset).
  void SetState(uint64_t seed, uint64_t offset) {
    seed_.store(seed);
    offset_.store(offset);
  }
  // Reserves n counters; returns the first.
  uint64_t Reserve(uint64_t n) { return offset_.fetch_add(n); }

 private:
  std::atomic<uint64_t> seed_;
  std::atomic<uint64_t> offset_{0};
};

// The process-wide default generator (seed 0 until ManualSeed is called).
Generator& DefaultGenerator();
inline void ManualSeed(uint64_t seed) { DefaultGenerator().ManualSeed(seed); }

}  // namespace trainyard
