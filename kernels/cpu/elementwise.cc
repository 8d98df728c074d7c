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
TY_ALWAYS_INLINE T GeluTanh(T x) {
  const T k = static_cast<T>(kSqrt2OverPi);
  T t = FastTanh(k * (x + static_cast<T>(0.044715) * x * x * x));
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + t);
}

template <typename T>
TY_ALWAYS_INLINE T GeluTanhGrad(T x) {
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
      return UnaryApply(it, out, x, 1, [](T v) TY_INLINE_LAMBDA { return v; });
    case UnaryOp::kNeg:
      return UnaryApply(it, out, x, 1, [](T v) TY_INLINE_LAMBDA { return -v; });
    case UnaryOp::kExp:
      return UnaryApply(it, out, x, 8, [](T v) TY_INLINE_LAMBDA { return FastExp(v); });
    case UnaryOp::kLog:
      return UnaryApply(it, out, x, 8, [](T v) TY_INLINE_LAMBDA { return std::log(v); });
    case UnaryOp::kSqrt:
      return UnaryApply(it, out, x, 4, [](T v) TY_INLINE_LAMBDA { return std::sqrt(v); });
    case UnaryOp::kRsqrt:
      return UnaryApply(it, out, x, 4, [](T v) TY_INLINE_LAMBDA { return T(1) / std::sqrt(v); });
    case UnaryOp::kAbs:
      return UnaryApply(it, out, x, 1, [](T v) TY_INLINE_LAMBDA { return std::fabs(v); });
    case UnaryOp::kSign:
      return UnaryApply(it, out, x, 1, [](T v) TY_INLINE_LAMBDA { return T((v > 0) - (v < 0)); });
    case UnaryOp::kRelu:
      return UnaryApply(it, out, x, 1, [](T v) TY_INLINE_LAMBDA { return v < 0 ? T(0) : v; });
    case UnaryOp::kSigmoid:
      return UnaryApply(it, out, x, 8, [](T v) TY_INLINE_LAMBDA { return FastSigmoid(v); });
    case UnaryOp::kTanh:
      return UnaryApply(it, out, x, 8, [](T v) TY_INLINE_LAMBDA { return FastTanh(v); });
    case UnaryOp::kSilu:
      return UnaryApply(it, out, x, 8, [](T v) TY_INLINE_LAMBDA { return v * FastSigmoid(v); });
    case UnaryOp::kGeluTanh:
      return UnaryApply(it, out, x, 12, [](T v) TY_INLINE_LAMBDA { return GeluTanh(v); });
    case UnaryOp::kGeluErf:
      return UnaryApply(it, out, x, 12, [](T v) TY_INLINE_LAMBDA {
        return T(0.5) * v * (T(1) + FastErf(v * static_cast<T>(kInvSqrt2)));
      });
    case UnaryOp::kPow:
      if (a == T(2)) return UnaryApply(it, out, x, 1, [](T v) TY_INLINE_LAMBDA { return v * v; });
      return UnaryApply(it, out, x, 16, [a](T v) TY_INLINE_LAMBDA { return std::pow(v, a); });
    case UnaryOp::kClamp:
      return UnaryApply(it, out, x, 1, [a, b](T v) TY_INLINE_LAMBDA {
        T r = v < a ? a : v;
        r = r > b ? b : r;
        return v != v ? v : r;
      });
    case UnaryOp::kAffine:
      return UnaryApply(it, out, x, 1, [a, b](T v) TY_INLINE_LAMBDA { return a * v + b; });
  }
  TY_CHECK(false) << "unknown unary op " << static_cast<int>(op);
}

namespace {

// gx[i] = f(x[i], y[i], g[i]) over [0, n), in chunks over threads. `x` and `y` are read only
// when the op's derivative needs them (Reads says which), so either may be null otherwise.
enum class Reads { kG, kXG, kYG, kXYG };

template <Reads R, typename T, typename F>
TY_SIMD void BackwardRun(int64_t n, const T* __restrict x, const T* __restrict y,
                         const T* __restrict g, T* __restrict gx, F f) {
  for (int64_t i = 0; i < n; ++i) {
    const T xv = (R == Reads::kXG || R == Reads::kXYG) ? x[i] : T(0);
    const T yv = (R == Reads::kYG || R == Reads::kXYG) ? y[i] : T(0);
    gx[i] = f(xv, yv, g[i]);
  }
}

template <Reads R, typename T, typename F>
void BackwardApply(int64_t n, int64_t cost, const T* x, const T* y, const T* g, T* gx, F f) {
  ParallelFor(n, GrainFor(cost), [&](int64_t lo, int64_t hi) {
    BackwardRun<R>(hi - lo, R == Reads::kG || R == Reads::kYG ? x : x + lo,
                   R == Reads::kG || R == Reads::kXG ? y : y + lo, g + lo, gx + lo, f);
  });
}

}  // namespace

template <typename T>
void UnaryBackward(UnaryOp op, int64_t n, const T* x, const T* y, const T* g, T* gx, T a, T b) {
  constexpr Reads kG = Reads::kG, kXG = Reads::kXG, kYG = Reads::kYG;
  switch (op) {
    case UnaryOp::kCopy:
      return BackwardApply<kG>(n, 1, x, y, g, gx, [](T, T, T gv) TY_INLINE_LAMBDA { return gv; });
    case UnaryOp::kNeg:
      return BackwardApply<kG>(n, 1, x, y, g, gx, [](T, T, T gv) TY_INLINE_LAMBDA { return -gv; });
    case UnaryOp::kExp:
      return BackwardApply<kYG>(n, 1, x, y, g, gx,
                                [](T, T yv, T gv) TY_INLINE_LAMBDA { return gv * yv; });
    case UnaryOp::kLog:
      return BackwardApply<kXG>(n, 1, x, y, g, gx,
                                [](T xv, T, T gv) TY_INLINE_LAMBDA { return gv / xv; });
    case UnaryOp::kSqrt:
      return BackwardApply<kYG>(n, 1, x, y, g, gx,
                                [](T, T yv, T gv) TY_INLINE_LAMBDA { return gv / (T(2) * yv); });
    case UnaryOp::kRsqrt:
      return BackwardApply<kYG>(n, 1, x, y, g, gx, [](T, T yv, T gv) TY_INLINE_LAMBDA {
        return gv * T(-0.5) * yv * yv * yv;
      });
    case UnaryOp::kAbs:
      return BackwardApply<kXG>(n, 1, x, y, g, gx, [](T xv, T, T gv) TY_INLINE_LAMBDA {
        return gv * T((xv > 0) - (xv < 0));
      });
    case UnaryOp::kSign:
      return BackwardApply<kG>(n, 1, x, y, g, gx, [](T, T, T) TY_INLINE_LAMBDA { return T(0); });
    case UnaryOp::kRelu:
      return BackwardApply<kXG>(n, 1, x, y, g, gx,
                                [](T xv, T, T gv) TY_INLINE_LAMBDA { return xv > 0 ? gv : T(0); });
    case UnaryOp::kSigmoid:
      return BackwardApply<kYG>(
          n, 1, x, y, g, gx, [](T, T yv, T gv) TY_INLINE_LAMBDA { return gv * yv * (T(1) - yv); });
    case UnaryOp::kTanh:
      return BackwardApply<kYG>(
          n, 1, x, y, g, gx, [](T, T yv, T gv) TY_INLINE_LAMBDA { return gv * (T(1) - yv * yv); });
    case UnaryOp::kSilu:
      return BackwardApply<kXG>(n, 8, x, y, g, gx, [](T xv, T, T gv) TY_INLINE_LAMBDA {
        T s = FastSigmoid(xv);
        return gv * s * (T(1) + xv * (T(1) - s));
      });
    case UnaryOp::kGeluTanh:
      return BackwardApply<kXG>(
          n, 12, x, y, g, gx, [](T xv, T, T gv) TY_INLINE_LAMBDA { return gv * GeluTanhGrad(xv); });
    case UnaryOp::kGeluErf:
      return BackwardApply<kXG>(n, 12, x, y, g, gx, [](T xv, T, T gv) TY_INLINE_LAMBDA {
        T cdf = T(0.5) * (T(1) + FastErf(xv * static_cast<T>(kInvSqrt2)));
        T pdf = FastExp(T(-0.5) * xv * xv) * static_cast<T>(kInvSqrt2Pi);
        return gv * (cdf + xv * pdf);
      });
    case UnaryOp::kPow:
      return BackwardApply<kXG>(n, 16, x, y, g, gx, [a](T xv, T, T gv) TY_INLINE_LAMBDA {
        if (a == T(0)) return T(0);
        return gv * a * std::pow(xv, a - T(1));
      });
    case UnaryOp::kClamp:
      return BackwardApply<kXG>(n, 1, x, y, g, gx, [a, b](T xv, T, T gv) TY_INLINE_LAMBDA {
        return (xv >= a && xv <= b) ? gv : T(0);
      });
    case UnaryOp::kAffine:
      return BackwardApply<kG>(n, 1, x, y, g, gx,
                               [a](T, T, T gv) TY_INLINE_LAMBDA { return gv * a; });
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
