// CudaBackendImpl's random fills: FillUniform, FillNormal and FillBernoulli, with the semantics
// of kernels/cpu/random.h (Note [Bit-exact ports] in backend_impl.h: Philox4x32-10 with the
// CPU's counter layout).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"

namespace trainyard::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct Words {
  uint32_t v[4];
};

__device__ __forceinline__ Words Philox(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

__device__ __forceinline__ float UnitFloat(uint32_t w) {
  return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
}
__device__ __forceinline__ double UnitDouble(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// lo + (hi - lo) u, rounded as the CPU's FillUniform<T> (T's hi - lo, then double), kept < hi
// in T (in f32 for bf16/f16).
template <typename T>
struct UniformFn {
  double lo, hi;  // already rounded to T (to f32 for bf16/f16)
  __device__ void operator()(const Words& r, Quad<T>* q) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (std::is_same_v<T, double>) {
        const double u = UnitDouble(r.v[j], r.v[(j + 1) % 4]);
        const double v = __dadd_rn(lo, __dmul_rn(__dsub_rn(hi, lo), u));
        q->v[j] = v < hi ? v : lo;
      } else {
        // Drawn and kept < hi in f32, then rounded to T, as the CPU draws bf16/f16 (in f32,
        // then converted): the rounding may reach hi, on both.
        const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
        const double range = static_cast<double>(__fsub_rn(fhi, flo));
        const float v = __double2float_rn(__dadd_rn(lo, __dmul_rn(range, UnitFloat(r.v[j]))));
        q->v[j] = FromFloat<T>(v < fhi ? v : flo);
      }
    }
  }
};

// Box-Muller on the word pairs (0, 1) and (2, 3), as FillNormal in random.cc.
template <typename T>
struct NormalFn {
  double mean, std;  // already rounded to T (to f32 for bf16/f16)
  __device__ void operator()(const Words& r, Quad<T>* q) const {
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      const double u1 = 1.0 - UnitDouble(r.v[j], r.v[j + 1]);
      const double u2 = UnitDouble(r.v[j + 1], r.v[j]);
      const double rad = sqrt(__dmul_rn(-2.0, log(u1)));
      double sn, cs;
      sincos(__dmul_rn(6.283185307179586, u2), &sn, &cs);
      q->v[j] = Narrow(__dadd_rn(mean, __dmul_rn(__dmul_rn(std, rad), cs)));
      q->v[j + 1] = Narrow(__dadd_rn(mean, __dmul_rn(__dmul_rn(std, rad), sn)));
    }
  }
  __device__ static T Narrow(double v) {
    if constexpr (std::is_same_v<T, double>) {
      return v;
    } else {
      return FromFloat<T>(__double2float_rn(v));
    }
  }
};

struct BernoulliFn {
  double p_keep;
  __device__ void operator()(const Words& r, Quad<uint8_t>* q) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) q->v[j] = UnitFloat(r.v[j]) < p_keep;
  }
};

// Element i of a draw takes counter offset + i / 4 and word i % 4 (kernels/cpu/random.h):
// thread c of the grid-stride loop draws counter c for elements [4c, 4c + 4). `quad`: out is
// aligned for one 4-element store.
template <typename T, typename F>
__global__ void RandomKernel(int64_t n, T* out, uint64_t seed, uint64_t offset, bool quad, F f) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t c = GlobalThread(); c < groups; c += GridThreads()) {
    const Words r = Philox(seed, offset + static_cast<uint64_t>(c));
    Quad<T> q;
    f(r, &q);
    if (quad && 4 * c + 4 <= n) {
      reinterpret_cast<Quad<T>*>(out)[c] = q;
    } else {
      for (int j = 0; j < 4 && 4 * c + j < n; ++j) out[4 * c + j] = q.v[j];
    }
  }
}

template <typename T, typename F>
void LaunchRandom(const char* name, int64_t n, T* out, uint64_t seed, uint64_t offset, F f,
                  cudaStream_t stream) {
  if (n <= 0) return;
  const bool quad = reinterpret_cast<uintptr_t>(out) % alignof(Quad<T>) == 0;
  RandomKernel<<<BlocksFor(CeilDiv(n, 4)), kThreads, 0, stream>>>(n, out, seed, offset, quad, f);
  CheckLaunch(name);
}

// The value v rounded to the draw's precision (f32 for f32/bf16/f16), as the CPU rounds its
// lo/hi or mean/std to T.
template <typename T>
double Rounded(double v) {
  return std::is_same_v<T, double> ? v : static_cast<double>(static_cast<float>(v));
}

}  // namespace

void CudaBackendImpl::FillUniform(ScalarType type, int64_t n, void* out, uint64_t seed,
                                  uint64_t offset, double lo, double hi, Stream stream) {
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    LaunchRandom("uniform", n, static_cast<T*>(out), seed, offset,
                 UniformFn<T>{Rounded<T>(lo), Rounded<T>(hi)}, AsStream(stream));
  };
  DispatchDtype<DtypeSet::kFloatF64>(type, "uniform", launch);
}

void CudaBackendImpl::FillNormal(ScalarType type, int64_t n, void* out, uint64_t seed,
                                 uint64_t offset, double mean, double std, Stream stream) {
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    LaunchRandom("normal", n, static_cast<T*>(out), seed, offset,
                 NormalFn<T>{Rounded<T>(mean), Rounded<T>(std)}, AsStream(stream));
  };
  DispatchDtype<DtypeSet::kFloatF64>(type, "normal", launch);
}

void CudaBackendImpl::FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset,
                                    double p_keep, Stream stream) {
  LaunchRandom("bernoulli", n, out, seed, offset, BernoulliFn{p_keep}, AsStream(stream));
}

}  // namespace trainyard::kernels::cuda
