// Element types of tensors. Floating types compute (f32 for training, f64 for gradient checks);
// bf16 and f16 are storage types converted with to(); integer types hold indices and labels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "kernels/cpu/half.h"

namespace trainyard {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kBFloat16,
  kFloat16,
  kInt64,
  kInt32,
  kUInt8,
  kBool
};

size_t ElementSize(DType t);
const char* DTypeName(DType t);  // "float32", "bfloat16", ... as PyTorch spells them
bool IsFloating(DType t);
StatusOr<DType> ParseDType(const std::string& name);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBFloat16;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::kFloat16;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

}  // namespace trainyard

// Dispatch on a runtime dtype: the body sees `scalar_t`. The FLOATING form covers the types
// ops compute in (f32, f64); ALL covers every dtype.
#define TY_DTYPE_CASE(DT, T, ...) \
  case DT: {                      \
    using scalar_t = T;           \
    __VA_ARGS__();                \
    break;                        \
  }

#define TY_DISPATCH_FLOATING(dtype, op_name, ...)                                           \
  [&] {                                                                                     \
    switch (dtype) {                                                                        \
      TY_DTYPE_CASE(::trainyard::DType::kFloat32, float, __VA_ARGS__)                       \
      TY_DTYPE_CASE(::trainyard::DType::kFloat64, double, __VA_ARGS__)                      \
      default:                                                                              \
        TY_CHECK(false) << op_name << ": dtype " << ::trainyard::DTypeName(dtype)           \
                        << " is not supported; use float32 or float64 (convert with To())"; \
    }                                                                                       \
  }()

#define TY_DISPATCH_ALL(dtype, op_name, ...)                                           \
  [&] {                                                                                \
    switch (dtype) {                                                                   \
      TY_DTYPE_CASE(::trainyard::DType::kFloat32, float, __VA_ARGS__)                  \
      TY_DTYPE_CASE(::trainyard::DType::kFloat64, double, __VA_ARGS__)                 \
      TY_DTYPE_CASE(::trainyard::DType::kBFloat16, ::trainyard::BFloat16, __VA_ARGS__) \
      TY_DTYPE_CASE(::trainyard::DType::kFloat16, ::trainyard::Half, __VA_ARGS__)      \
      TY_DTYPE_CASE(::trainyard::DType::kInt64, int64_t, __VA_ARGS__)                  \
      TY_DTYPE_CASE(::trainyard::DType::kInt32, int32_t, __VA_ARGS__)                  \
      TY_DTYPE_CASE(::trainyard::DType::kUInt8, uint8_t, __VA_ARGS__)                  \
      TY_DTYPE_CASE(::trainyard::DType::kBool, bool, __VA_ARGS__)                      \
    }                                                                                  \
  }()
