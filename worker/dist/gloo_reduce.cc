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

void Bf16SumFn(void* out, const void* a, const void* b, size_t n) {
  BFloat16* o = static_cast<BFloat16*>(out);
  const BFloat16* x = static_cast<const BFloat16*>(a);
  const BFloat16* y = static_cast<const BFloat16*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = ToBFloat16(ToFloat(x[i]) + ToFloat(y[i]));
}

void Bf16MaxFn(void* out, const void* a, const void* b, size_t n) {
  BFloat16* o = static_cast<BFloat16*>(out);
  const BFloat16* x = static_cast<const BFloat16*>(a);
  const BFloat16* y = static_cast<const BFloat16*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float fx = ToFloat(x[i]), fy = ToFloat(y[i]);
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
      BFloat16* p = t.data<BFloat16>();
      for (int64_t i = 0; i < count; ++i) p[i] = ToBFloat16(ToFloat(p[i]) / n);
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
