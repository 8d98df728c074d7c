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

// The math helpers below are forced inline: called from a TY_SIMD clone through a lambda, GCC
// otherwise keeps some of them as out-of-line scalar calls, and the loop no longer vectorises.
// TY_INLINE_LAMBDA does the same for a lambda: [](float v) TY_INLINE_LAMBDA { ... }.
#if defined(__GNUC__)
#define TY_ALWAYS_INLINE inline __attribute__((always_inline))
#define TY_INLINE_LAMBDA __attribute__((always_inline))
#else
#define TY_ALWAYS_INLINE inline
#define TY_INLINE_LAMBDA
#endif

namespace trainyard::kernels::cpu {

// exp(x) for float with about 1 ulp error, vectorisable (Cephes-style: x = n ln2 + r,
// exp(r) by a degree-6 polynomial, 2^n through the exponent bits). exp(-inf) = 0, exp(nan) = nan,
// overflow gives inf.
TY_ALWAYS_INLINE float FastExp(float x) {
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
TY_ALWAYS_INLINE double FastExp(double x) { return std::exp(x); }

// tanh through exp: tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|); accurate to a few ulp.
TY_ALWAYS_INLINE float FastTanh(float x) {
  float ax = std::fabs(x);
  float e = FastExp(-2.0f * ax);
  float t = (1.0f - e) / (1.0f + e);
  return std::copysign(t, x);
}
TY_ALWAYS_INLINE double FastTanh(double x) { return std::tanh(x); }

// erf(x) for float, vectorisable, absolute error below 3e-7. For |x| < 1 the Taylor series
// 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)) to n = 10; beyond, Abramowitz and Stegun
// 7.1.26 (as PyTorch's vectorised CPU erf): 1 - t (a1 + t (a2 + ...)) exp(-x^2) with
// t = 1 / (1 + p |x|), whose cancellation near 0 the series avoids. erf(nan) = nan,
// erf(+-inf) = +-1.
TY_ALWAYS_INLINE float FastErf(float x) {
  const float ax = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float r = 1.061405429f;
  r = r * t - 1.453152027f;
  r = r * t + 1.421413741f;
  r = r * t - 0.284496736f;
  r = r * t + 0.254829592f;
  const float tail = 1.0f - r * t * FastExp(-ax * ax);
  const float z = ax * ax;
  float q = 1.480719282e-08f;
  q = q * z - 1.636584469e-07f;
  q = q * z + 1.646211437e-06f;
  q = q * z - 1.492565036e-05f;
  q = q * z + 1.205533298e-04f;
  q = q * z - 8.548327023e-04f;
  q = q * z + 5.223977625e-03f;
  q = q * z - 2.686617065e-02f;
  q = q * z + 1.128379167e-01f;
  q = q * z - 3.761263890e-01f;
  q = q * z + 1.128379167f;
  const float e = ax < 1.0f ? ax * q : tail;
  return std::copysign(e, x);
}
TY_ALWAYS_INLINE double FastErf(double x) { return std::erf(x); }

TY_ALWAYS_INLINE float FastSigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }
TY_ALWAYS_INLINE double FastSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace trainyard::kernels::cpu
