// Device helpers for the library's kernels: loads and stores that convert bf16/f16 storage to
// and from f32 (kernels compute in f32), and dispatch on the floating storage types.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// Dispatch on the floating storage types kernels accept: the body sees `scalar_t`.
#define TY_CUDA_DISPATCH_FLOAT(type, name, ...)                                          \
  [&] {                                                                                 \
    switch (type) {                                                                     \
      case ::trainyard::kernels::cuda::ScalarType::kF32: {                              \
        using scalar_t = float;                                                         \
        __VA_ARGS__();                                                                  \
        break;                                                                          \
      }                                                                                 \
      case ::trainyard::kernels::cuda::ScalarType::kBF16: {                             \
        using scalar_t = __nv_bfloat16;                                                 \
        __VA_ARGS__();                                                                  \
        break;                                                                          \
      }                                                                                 \
      case ::trainyard::kernels::cuda::ScalarType::kF16: {                              \
        using scalar_t = __half;                                                        \
        __VA_ARGS__();                                                                  \
        break;                                                                          \
      }                                                                                 \
      default:                                                                          \
        TY_CHECK(false) << name << ": dtype " << static_cast<int>(type)                 \
                        << " is not supported on CUDA (use float32, bfloat16 or float16)"; \
    }                                                                                   \
  }()

}  // namespace trainyard::kernels::cuda
