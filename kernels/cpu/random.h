// Random fills from Philox. Element i of a draw uses counter offset + i / 4 (lane i % 4), so a
// draw of n elements consumes (n + 3) / 4 counters: the caller advances its offset by that.
// T is float or double.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// Number of counters a draw of n elements consumes.
inline uint64_t CountersFor(int64_t n) { return static_cast<uint64_t>((n + 3) / 4); }

// out[i] uniform in [lo, hi).
template <typename T>
void FillUniform(int64_t n, T* out, uint64_t seed, uint64_t offset, T lo, T hi);

// out[i] normal with the given mean and standard deviation (Box-Muller on lane pairs).
template <typename T>
void FillNormal(int64_t n, T* out, uint64_t seed, uint64_t offset, T mean, T std);

// out[i] = 1 with probability p_keep, else 0.
void FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset, double p_keep);

}  // namespace trainyard::kernels::cpu
