#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <limits>

#include "common/check.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

template <typename T>
T Nan() {
  return std::numeric_limits<T>::quiet_NaN();
}

// Inner runs. Unit/zero strides take loops GCC vectorises; anything else is a strided loop.
template <typename T, typename F>
TY_SIMD void UnaryRun(T* o, const T* x, int64_t n, int64_t so, int64_t sx, F f) {
  if (so == 1 && sx == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i * so] = f(x[i * sx]);
  }
}

template <typename T, typename F>
TY_SIMD void BinaryRun(T* o, const T* x, const T* y, int64_t n, int64_t so, int64_t sx, int64_t sy,
                       F f) {
  if (so == 1 && sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
  } else if (so == 1 && sx == 1 && sy == 0) {
    const T b = y[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], b);
  } else if (so == 1 && sx == 0 && sy == 1) {
    const T a = x[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(a, y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i * so] = f(x[i * sx], y[i * sy]);
  }
}

template <typename T, typename F>
void UnaryApply(const StridedIter& it, T* out, const T* x, int64_t cost, F f) {
  ForEachRun(it, cost, [&](const int64_t* off, int64_t n) {
    UnaryRun(out + off[0], x + off[1], n, it.inner_stride(0), it.inner_stride(1), f);
  });
}

template <typename T, typename F>
void BinaryApply(const StridedIter& it, T* out, const T* x, const T* y, F f) {
  ForEachRun(it, 1, [&](const int64_t* off, int64_t n) {
    BinaryRun(out + off[0], x + off[1], y + off[2], n, it.inner_stride(0), it.inner_stride(1),
              it.inner_stride(2), f);
  });
}

template <typename T>
T GeluTanh(T x) {
  const T k = static_cast<T>(kSqrt2OverPi);
  T t = FastTanh(k * (x + static_cast<T>(0.044715) * x * x * x));
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + t);
}

template <typename T>
T GeluTanhGrad(T x) {
  const T k = static_cast<T>(kSqrt2OverPi);
  const T c = static_cast<T>(0.044715);
  T t = FastTanh(k * (x + c * x * x * x));
  return static_cast<T>(0.5) * (static_cast<T>(1) + t) +
         static_cast<T>(0.5) * x * (static_cast<T>(1) - t * t) * k *
             (static_cast<T>(1) + static_cast<T>(3) * c * x * x);
}

}  // namespace

template <typename T>
void Unary(UnaryOp op, const StridedIter& it, T* out, const T* x, T a, T b) {
  switch (op) {
    case UnaryOp::kCopy:
      return UnaryApply(it, out, x, 1, [](T v) { return v; });
    case UnaryOp::kNeg:
      return UnaryApply(it, out, x, 1, [](T v) { return -v; });
    case UnaryOp::kExp:
      return UnaryApply(it, out, x, 8, [](T v) { return FastExp(v); });
    case UnaryOp::kLog:
      return UnaryApply(it, out, x, 8, [](T v) { return std::log(v); });
    case UnaryOp::kSqrt:
      return UnaryApply(it, out, x, 4, [](T v) { return std::sqrt(v); });
    case UnaryOp::kRsqrt:
      return UnaryApply(it, out, x, 4, [](T v) { return T(1) / std::sqrt(v); });
    case UnaryOp::kAbs:
      return UnaryApply(it, out, x, 1, [](T v) { return std::fabs(v); });
    case UnaryOp::kSign:
      return UnaryApply(it, out, x, 1, [](T v) { return T((v > 0) - (v < 0)); });
    case UnaryOp::kRelu:
      return UnaryApply(it, out, x, 1, [](T v) { return v < 0 ? T(0) : v; });
    case UnaryOp::kSigmoid:
      return UnaryApply(it, out, x, 8, [](T v) { return FastSigmoid(v); });
    case UnaryOp::kTanh:
      return UnaryApply(it, out, x, 8, [](T v) { return FastTanh(v); });
    case UnaryOp::kSilu:
      return UnaryApply(it, out, x, 8, [](T v) { return v * FastSigmoid(v); });
    case UnaryOp::kGeluTanh:
      return UnaryApply(it, out, x, 12, [](T v) { return GeluTanh(v); });
    case UnaryOp::kGeluErf:
      return UnaryApply(it, out, x, 12, [](T v) {
        return T(0.5) * v * (T(1) + std::erf(v * static_cast<T>(kInvSqrt2)));
      });
    case UnaryOp::kPow:
      if (a == T(2)) return UnaryApply(it, out, x, 1, [](T v) { return v * v; });
      return UnaryApply(it, out, x, 16, [a](T v) { return std::pow(v, a); });
    case UnaryOp::kClamp:
      return UnaryApply(it, out, x, 1, [a, b](T v) {
        T r = v < a ? a : v;
        r = r > b ? b : r;
        return v != v ? v : r;
      });
    case UnaryOp::kAffine:
      return UnaryApply(it, out, x, 1, [a, b](T v) { return a * v + b; });
  }
  TY_CHECK(false) << "unknown unary op " << static_cast<int>(op);
}

template <typename T>
void UnaryBackward(UnaryOp op, int64_t n, const T* x, const T* y, const T* g, T* gx, T a, T b) {
  // One operand per array position: reuse the strided machinery on a flat run.
  auto run = [&](int64_t cost, auto f) {
    ParallelFor(n, GrainFor(cost), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) gx[i] = f(i);
    });
  };
  switch (op) {
    case UnaryOp::kCopy:
      return run(1, [&](int64_t i) { return g[i]; });
    case UnaryOp::kNeg:
      return run(1, [&](int64_t i) { return -g[i]; });
    case UnaryOp::kExp:
      return run(1, [&](int64_t i) { return g[i] * y[i]; });
    case UnaryOp::kLog:
      return run(1, [&](int64_t i) { return g[i] / x[i]; });
    case UnaryOp::kSqrt:
      return run(1, [&](int64_t i) { return g[i] / (T(2) * y[i]); });
    case UnaryOp::kRsqrt:
      return run(1, [&](int64_t i) { return g[i] * T(-0.5) * y[i] * y[i] * y[i]; });
    case UnaryOp::kAbs:
      return run(1, [&](int64_t i) { return g[i] * T((x[i] > 0) - (x[i] < 0)); });
    case UnaryOp::kSign:
      return run(1, [&](int64_t) { return T(0); });
    case UnaryOp::kRelu:
      return run(1, [&](int64_t i) { return x[i] > 0 ? g[i] : T(0); });
    case UnaryOp::kSigmoid:
      return run(1, [&](int64_t i) { return g[i] * y[i] * (T(1) - y[i]); });
    case UnaryOp::kTanh:
      return run(1, [&](int64_t i) { return g[i] * (T(1) - y[i] * y[i]); });
    case UnaryOp::kSilu:
      return run(8, [&](int64_t i) {
        T s = FastSigmoid(x[i]);
        return g[i] * s * (T(1) + x[i] * (T(1) - s));
      });
    case UnaryOp::kGeluTanh:
      return run(12, [&](int64_t i) { return g[i] * GeluTanhGrad(x[i]); });
    case UnaryOp::kGeluErf:
      return run(12, [&](int64_t i) {
        T v = x[i];
        T cdf = T(0.5) * (T(1) + std::erf(v * static_cast<T>(kInvSqrt2)));
        T pdf = std::exp(T(-0.5) * v * v) * static_cast<T>(kInvSqrt2Pi);
        return g[i] * (cdf + v * pdf);
      });
    case UnaryOp::kPow:
      return run(16, [&](int64_t i) {
        if (a == T(0)) return T(0);
        return g[i] * a * std::pow(x[i], a - T(1));
      });
    case UnaryOp::kClamp:
      return run(1, [&](int64_t i) { return (x[i] >= a && x[i] <= b) ? g[i] : T(0); });
    case UnaryOp::kAffine:
      return run(1, [&](int64_t i) { return g[i] * a; });
  }
  TY_CHECK(false) << "unknown unary op " << static_cast<int>(op);
}

template <typename T>
void Binary(BinaryOp op, const StridedIter& it, T* out, const T* x, const T* y, T alpha) {
  switch (op) {
    case BinaryOp::kAdd:
      if (alpha == T(1)) return BinaryApply(it, out, x, y, [](T u, T v) { return u + v; });
      return BinaryApply(it, out, x, y, [alpha](T u, T v) { return u + alpha * v; });
    case BinaryOp::kSub:
      if (alpha == T(1)) return BinaryApply(it, out, x, y, [](T u, T v) { return u - v; });
      return BinaryApply(it, out, x, y, [alpha](T u, T v) { return u - alpha * v; });
    case BinaryOp::kMul:
      return BinaryApply(it, out, x, y, [](T u, T v) { return u * v; });
    case BinaryOp::kDiv:
      return BinaryApply(it, out, x, y, [](T u, T v) { return u / v; });
    case BinaryOp::kMaximum:
      return BinaryApply(it, out, x, y,
                         [](T u, T v) { return u != u ? u : (v != v ? v : (u > v ? u : v)); });
    case BinaryOp::kMinimum:
      return BinaryApply(it, out, x, y,
                         [](T u, T v) { return u != u ? u : (v != v ? v : (u < v ? u : v)); });
    case BinaryOp::kPow:
      return BinaryApply(it, out, x, y, [](T u, T v) { return std::pow(u, v); });
  }
  TY_CHECK(false) << "unknown binary op " << static_cast<int>(op);
}

template <typename T>
void Compare(CompareOp op, const StridedIter& it, uint8_t* out, const T* x, const T* y) {
  auto apply = [&](auto f) {
    ForEachRun(it, 1, [&](const int64_t* off, int64_t n) {
      const int64_t so = it.inner_stride(0), sx = it.inner_stride(1), sy = it.inner_stride(2);
      uint8_t* o = out + off[0];
      const T* a = x + off[1];
      const T* b = y + off[2];
      for (int64_t i = 0; i < n; ++i) o[i * so] = f(a[i * sx], b[i * sy]) ? 1 : 0;
    });
  };
  switch (op) {
    case CompareOp::kEq:
      return apply([](T u, T v) { return u == v; });
    case CompareOp::kNe:
      return apply([](T u, T v) { return u != v; });
    case CompareOp::kLt:
      return apply([](T u, T v) { return u < v; });
    case CompareOp::kLe:
      return apply([](T u, T v) { return u <= v; });
    case CompareOp::kGt:
      return apply([](T u, T v) { return u > v; });
    case CompareOp::kGe:
      return apply([](T u, T v) { return u >= v; });
  }
}

template <typename T>
void Where(const StridedIter& it, T* out, const uint8_t* cond, const T* x, const T* y) {
  ForEachRun(it, 1, [&](const int64_t* off, int64_t n) {
    const int64_t so = it.inner_stride(0), sc = it.inner_stride(1);
    const int64_t sx = it.inner_stride(2), sy = it.inner_stride(3);
    T* o = out + off[0];
    const uint8_t* c = cond + off[1];
    const T* a = x + off[2];
    const T* b = y + off[3];
    for (int64_t i = 0; i < n; ++i) o[i * so] = c[i * sc] ? a[i * sx] : b[i * sy];
  });
}

template <typename T>
TY_SIMD void FillRun(T* out, int64_t n, T value) {
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}

template <typename T>
void Fill(int64_t n, T* out, T value) {
  ParallelFor(n, GrainFor(1), [&](int64_t b, int64_t e) { FillRun(out + b, e - b, value); });
}

#define TY_INSTANTIATE(T)                                                                   \
  template void Unary<T>(UnaryOp, const StridedIter&, T*, const T*, T, T);                  \
  template void UnaryBackward<T>(UnaryOp, int64_t, const T*, const T*, const T*, T*, T, T); \
  template void Binary<T>(BinaryOp, const StridedIter&, T*, const T*, const T*, T);         \
  template void Compare<T>(CompareOp, const StridedIter&, uint8_t*, const T*, const T*);    \
  template void Where<T>(const StridedIter&, T*, const uint8_t*, const T*, const T*);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
#undef TY_INSTANTIATE

template void Compare<int64_t>(CompareOp, const StridedIter&, uint8_t*, const int64_t*,
                               const int64_t*);
template void Compare<int32_t>(CompareOp, const StridedIter&, uint8_t*, const int32_t*,
                               const int32_t*);
template void Compare<uint8_t>(CompareOp, const StridedIter&, uint8_t*, const uint8_t*,
                               const uint8_t*);
template void Fill<float>(int64_t, float*, float);
template void Fill<double>(int64_t, double*, double);
template void Fill<int64_t>(int64_t, int64_t*, int64_t);
template void Fill<int32_t>(int64_t, int32_t*, int32_t);
template void Fill<uint8_t>(int64_t, uint8_t*, uint8_t);
template void Fill<uint16_t>(int64_t, uint16_t*, uint16_t);

}  // namespace trainyard::kernels::cpu
