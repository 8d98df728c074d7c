// Vectorisation helpers. TY_SIMD compiles a function three times (AVX-512, AVX2+FMA, baseline
// x86-64) and picks the best clone for the running processor at load time, so one binary runs
// on any x86-64 and uses wide vectors where they exist. Loops in such functions are written as
// plain scalar code that GCC vectorises; the math below is branch-free for the same reason.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// Sanitizer runtimes are not ready when ifunc resolvers run at load time, so sanitized builds
// take the baseline code.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define TY_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TY_SIMD
#endif

namespace trainyard::kernels::cpu {

// exp(x) for float with about 1 ulp error, vectorisable (Cephes-style: x = n ln2 + r,
// exp(r) by a degree-6 polynomial, 2^n through the exponent bits). exp(-inf) = 0, exp(nan) = nan,
// overflow gives inf.
inline float FastExp(float x) {
  const float hi = 88.72283935546875f, lo = -103.97208f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  float n = std::nearbyint(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n, split in two factors so that n down to -150 stays representable (subnormals).
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}
inline double FastExp(double x) { return std::exp(x); }

// tanh through exp: tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|); accurate to a few ulp.
inline float FastTanh(float x) {
  float ax = std::fabs(x);
  float e = FastExp(-2.0f * ax);
  float t = (1.0f - e) / (1.0f + e);
  return std::copysign(t, x);
}
inline double FastTanh(double x) { return std::tanh(x); }

inline float FastSigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }
inline double FastSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace trainyard::kernels::cpu
