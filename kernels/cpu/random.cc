#include "kernels/cpu/random.h"

#include <cmath>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/philox.h"

namespace trainyard::kernels::cpu {
namespace {

// Runs fn(i, words) for every group of 4 elements [4c, 4c + 4) that intersects [0, n).
template <typename F>
void ForEachCounter(int64_t n, uint64_t seed, uint64_t offset, const F& fn) {
  const int64_t groups = static_cast<int64_t>(CountersFor(n));
  ParallelFor(groups, GrainFor(40), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) fn(c * 4, Philox(seed, offset + static_cast<uint64_t>(c)));
  });
}

constexpr double kTwoPi = 6.283185307179586;

}  // namespace

template <typename T>
void FillUniform(int64_t n, T* out, uint64_t seed, uint64_t offset, T lo, T hi) {
  ForEachCounter(n, seed, offset, [&](int64_t base, const Philox4x32& r) {
    for (int j = 0; j < 4 && base + j < n; ++j) {
      double u = sizeof(T) == 4 ? UnitFloat(r.v[j]) : UnitDouble(r.v[j], r.v[(j + 1) % 4]);
      T v = static_cast<T>(lo + (hi - lo) * u);
      out[base + j] = v < hi ? v : lo;  // rounding may hit hi exactly
    }
  });
}

template <typename T>
void FillNormal(int64_t n, T* out, uint64_t seed, uint64_t offset, T mean, T std) {
  ForEachCounter(n, seed, offset, [&](int64_t base, const Philox4x32& r) {
    for (int j = 0; j < 4; j += 2) {
      // u1 in (0, 1] keeps the log finite.
      double u1 = 1.0 - UnitDouble(r.v[j], r.v[j + 1]);
      double u2 = UnitDouble(r.v[j + 1], r.v[j]);
      double rad = std::sqrt(-2.0 * std::log(u1));
      if (base + j < n) out[base + j] = static_cast<T>(mean + std * rad * std::cos(kTwoPi * u2));
      if (base + j + 1 < n)
        out[base + j + 1] = static_cast<T>(mean + std * rad * std::sin(kTwoPi * u2));
    }
  });
}

void FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset, double p_keep) {
  ForEachCounter(n, seed, offset, [&](int64_t base, const Philox4x32& r) {
    for (int j = 0; j < 4 && base + j < n; ++j) out[base + j] = UnitFloat(r.v[j]) < p_keep;
  });
}

template void FillUniform<float>(int64_t, float*, uint64_t, uint64_t, float, float);
template void FillUniform<double>(int64_t, double*, uint64_t, uint64_t, double, double);
template void FillNormal<float>(int64_t, float*, uint64_t, uint64_t, float, float);
template void FillNormal<double>(int64_t, double*, uint64_t, uint64_t, double, double);

}  // namespace trainyard::kernels::cpu
