// Strided copy with type conversion: dst[i] = Cast<D>(src[i]) over a StridedIter whose
// operand 0 is dst and operand 1 is src. Header-only so that the tensor layer can instantiate
// every (dst, src) pair it supports. Float to integer truncates toward zero, as C++ does.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/half.h"
#include "kernels/cpu/iter.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {

template <typename T>
inline float AsFloatIfHalf(T v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    return ToFloat(v);
  } else {
    return static_cast<float>(v);
  }
}

template <typename D, typename S>
inline D Cast(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return ToBFloat16(AsFloatIfHalf(v));
  } else if constexpr (std::is_same_v<D, Half>) {
    return ToHalf(AsFloatIfHalf(v));
  } else if constexpr (std::is_same_v<S, BFloat16> || std::is_same_v<S, Half>) {
    return static_cast<D>(ToFloat(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else {
    return static_cast<D>(v);
  }
}

template <typename D, typename S>
TY_SIMD void CastRun(D* dst, const S* src, int64_t n, int64_t sd, int64_t ss) {
  if (sd == 1 && ss == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = Cast<D>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * sd] = Cast<D>(src[i * ss]);
  }
}

template <typename D, typename S>
void CopyCast(const StridedIter& it, D* dst, const S* src) {
  if constexpr (std::is_same_v<D, S>) {
    if (it.ndim <= 1 && it.inner_stride(0) == 1 && it.inner_stride(1) == 1) {
      // Contiguous same-type copy: memcpy split across threads.
      const int64_t n = it.numel();
      ParallelFor(n, GrainFor(sizeof(D), 1 << 18), [&](int64_t b, int64_t e) {
        std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(D));
      });
      return;
    }
  }
  ForEachRun(it, 1, [&](const int64_t* off, int64_t n) {
    CastRun(dst + off[0], src + off[1], n, it.inner_stride(0), it.inner_stride(1));
  });
}

}  // namespace trainyard::kernels::cpu
