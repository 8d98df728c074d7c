// Element-wise reductions of the gloo backend (gloo_reduce.h).
#include "worker/dist/gloo_reduce.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/check.h"

namespace trainyard::dist {
namespace {

template <typename T>
void SumFn(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (o == x) {  // Gloo's ring always reduces into its first input
    T* __restrict oo = o;
    const T* __restrict yy = y;
    for (size_t i = 0; i < n; ++i) oo[i] += yy[i];
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  }
}

template <typename T>
inline bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename T>
void MaxFn(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  // NaN wins, as in torch.maximum.
  for (size_t i = 0; i < n; ++i) o[i] = (y[i] > x[i] || IsNan(y[i])) ? y[i] : x[i];
}

inline float Bf16ToFloat(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Branch-free ToBFloat16 (kernels/cpu/half.h), so the loops below vectorise.
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

void Bf16SumFn(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = FloatToBf16(Bf16ToFloat(x[i]) + Bf16ToFloat(y[i]));
}

void Bf16MaxFn(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float fx = Bf16ToFloat(x[i]), fy = Bf16ToFloat(y[i]);
    o[i] = (fy > fx || fy != fy) ? y[i] : x[i];
  }
}

void HalfSumFn(void* out, const void* a, const void* b, size_t n) {
  Half* o = static_cast<Half*>(out);
  const Half* x = static_cast<const Half*>(a);
  const Half* y = static_cast<const Half*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = ToHalf(ToFloat(x[i]) + ToFloat(y[i]));
}

void HalfMaxFn(void* out, const void* a, const void* b, size_t n) {
  Half* o = static_cast<Half*>(out);
  const Half* x = static_cast<const Half*>(a);
  const Half* y = static_cast<const Half*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float fx = ToFloat(x[i]), fy = ToFloat(y[i]);
    o[i] = (fy > fx || fy != fy) ? y[i] : x[i];
  }
}

}  // namespace

namespace internal {

void DivideBy(const Tensor& t, int n) {
  const int64_t count = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32: {
      float* p = t.data<float>();
      for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
      break;
    }
    case DType::kFloat64: {
      double* p = t.data<double>();
      for (int64_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case DType::kInt64: {
      int64_t* p = t.data<int64_t>();
      for (int64_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case DType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(t.raw_data());
      for (int64_t i = 0; i < count; ++i) p[i] = FloatToBf16(Bf16ToFloat(p[i]) / n);
      break;
    }
    case DType::kFloat16: {
      Half* p = t.data<Half>();
      for (int64_t i = 0; i < count; ++i) p[i] = ToHalf(ToFloat(p[i]) / n);
      break;
    }
    default:
      TY_CHECK(false) << "DivideBy on " << DTypeName(t.dtype());
  }
}

ReduceFn GetReduceFn(DType dtype, ReduceOp op) {
  const bool max = op == ReduceOp::kMax;
  switch (dtype) {
    case DType::kFloat32:
      return max ? &MaxFn<float> : &SumFn<float>;
    case DType::kFloat64:
      return max ? &MaxFn<double> : &SumFn<double>;
    case DType::kInt64:
      return max ? &MaxFn<int64_t> : &SumFn<int64_t>;
    case DType::kBFloat16:
      return max ? &Bf16MaxFn : &Bf16SumFn;
    case DType::kFloat16:
      return max ? &HalfMaxFn : &HalfSumFn;
    default:
      return nullptr;
  }
}

}  // namespace internal
}  // namespace trainyard::dist
