// Helpers shared by the library's kernels: loads and stores that convert bf16/f16 storage to
// and from f32 (kernels compute in f32), the compute type Acc<T>, and the host-side dispatch
// from a ScalarType to its storage type. The math is in device_math.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"

namespace trainyard::kernels::cuda {

// f32 <-> storage conversions used by every kernel (compute is in f32 for f32/bf16/f16).
template <typename T>
__device__ __forceinline__ float Load(const T* p) {
  return static_cast<float>(*p);
}
template <>
__device__ __forceinline__ float Load(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
template <>
__device__ __forceinline__ float Load(const __half* p) {
  return __half2float(*p);
}
template <typename T>
__device__ __forceinline__ T FromFloat(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat(float v) {
  return __float2half_rn(v);
}

// The compute type of storage T: f64 for f64, else f32 (f32, bf16, f16).
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ Acc<T> LoadAcc(const T* p) {
  if constexpr (std::is_same_v<T, double>) {
    return *p;
  } else {
    return Load(p);
  }
}
template <typename T>
__device__ __forceinline__ T FromAcc(Acc<T> v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return FromFloat<T>(v);
  }
}

// A storage type as a value: a dispatcher calls fn(Tag<T>{}), and the body takes T as
// typename decltype(tag)::type.
template <typename T>
struct Tag {
  using type = T;
};

// The dtypes a DispatchDtype accepts.
enum class DtypeSet {
  kFloat,        // f32, bf16, f16
  kFloatF64,     // f32, bf16, f16, f64
  kFloatF64Int,  // f32, bf16, f16, f64, i64, i32
};

// fn(Tag<T>{}) for t's storage type T; aborts naming `name` when t is not in kSet.
template <DtypeSet kSet, typename F>
void DispatchDtype(ScalarType t, const char* name, F&& fn) {
  constexpr bool kF64 = kSet != DtypeSet::kFloat, kInt = kSet == DtypeSet::kFloatF64Int;
  switch (t) {
    case ScalarType::kF32:
      return fn(Tag<float>{});
    case ScalarType::kBF16:
      return fn(Tag<__nv_bfloat16>{});
    case ScalarType::kF16:
      return fn(Tag<__half>{});
    case ScalarType::kF64:
      if constexpr (kF64) return fn(Tag<double>{});
      break;
    case ScalarType::kI64:
      if constexpr (kInt) return fn(Tag<int64_t>{});
      break;
    case ScalarType::kI32:
      if constexpr (kInt) return fn(Tag<int32_t>{});
      break;
    default:
      break;
  }
  const char* use = kInt   ? "float32, bfloat16, float16, float64, int64 or int32"
                    : kF64 ? "float32, bfloat16, float16 or float64"
                           : "float32, bfloat16 or float16";
  TY_CHECK(false) << name << ": dtype " << static_cast<int>(t) << " is not supported on CUDA (use "
                  << use << ")";
}

}  // namespace trainyard::kernels::cuda
