// Math shared by the library's kernels, as overloads on the compute type (Acc<T> of
// convert.cuh), so templates over it pick the f32 or the f64 version by argument type.
//   f32: exp, tanh and erf are ports of kernels/cpu/simd.h (FastExp, FastTanh, FastErf), so
//        that CUDA and CPU agree to an ulp or two (__expf loses ulps away from 0); sqrt and
//        division are IEEE-rounded (__fsqrt_rn, __fdiv_rn); log and pow go through f64
//        (__logf has an absolute error, bad for a loss near 0, and __powf is NaN for a
//        negative base). The library builds without --use_fast_math, so subnormals stay.
//   f64: CUDA's accurate functions.
// Also the integer helpers for launch sizes and indices: CeilDiv and the row blocks (host),
// Min64 and the grid-stride loop's bounds (device).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace trainyard::kernels::cuda {

constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
__device__ __forceinline__ int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// A grid-stride loop: for (i = GlobalThread(); i < n; i += GridThreads()).
__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Rows of `len` elements, a warp or more per row, 256 threads a block: block (lanes, rows per
// block), and a grid of blocks for `rows` rows, capped so a row-stride loop covers the rest.
inline dim3 RowBlock(int64_t len) {
  const unsigned lanes =
      len >= 256 ? 256u : static_cast<unsigned>(std::max<int64_t>(32, CeilDiv(len, 32) * 32));
  return dim3(lanes, 256 / lanes);
}
inline unsigned RowGrid(int64_t rows, dim3 block) {
  return static_cast<unsigned>(
      std::min<int64_t>(std::max<int64_t>(CeilDiv(rows, block.y), 1), 65535 * 8));
}

__device__ __forceinline__ float Exp(float x) {  // FastExp: Cephes polynomial, 2^n via bits
  const float hi = 88.72283935546875f, lo = -103.97208f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const float n = rintf(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int ni = static_cast<int>(n), n1 = ni >> 1, n2 = ni - n1;
  float y = p * __int_as_float((n1 + 127) << 23) * __int_as_float((n2 + 127) << 23);
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}
__device__ __forceinline__ double Exp(double x) { return exp(x); }
__device__ __forceinline__ float Log(float x) { return static_cast<float>(log(double{x})); }
__device__ __forceinline__ double Log(double x) { return log(x); }
__device__ __forceinline__ float Sqrt(float x) { return __fsqrt_rn(x); }
__device__ __forceinline__ double Sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double Div(double a, double b) { return a / b; }
__device__ __forceinline__ float Abs(float x) { return fabsf(x); }
__device__ __forceinline__ double Abs(double x) { return fabs(x); }
__device__ __forceinline__ float Pow(float a, float b) {
  return static_cast<float>(pow(double{a}, double{b}));
}
__device__ __forceinline__ double Pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float Tanh(float x) {  // FastTanh
  const float e = Exp(-2.0f * fabsf(x));
  return copysignf(__fdiv_rn(1.0f - e, 1.0f + e), x);
}
__device__ __forceinline__ double Tanh(double x) { return tanh(x); }
__device__ __forceinline__ float Erf(float x) {  // FastErf: series below 1, A&S 7.1.26 above
  const float ax = fabsf(x);
  const float t = __fdiv_rn(1.0f, 1.0f + 0.3275911f * ax);
  float r = 1.061405429f;
  r = r * t - 1.453152027f;
  r = r * t + 1.421413741f;
  r = r * t - 0.284496736f;
  r = r * t + 0.254829592f;
  const float tail = 1.0f - r * t * Exp(-ax * ax);
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
  return copysignf(ax < 1.0f ? ax * q : tail, x);
}
__device__ __forceinline__ double Erf(double x) { return erf(x); }

}  // namespace trainyard::kernels::cuda
