// CudaBackendImpl's elementwise kernels: Copy, Fill, Unary, UnaryBackward, Binary, Compare and
// Where, with the formulas of kernels/cpu/elementwise.cc and copy.h.
//
// Note [Elementwise launches]
// Every op is a functor out = op(in...) run by Launch over a StridedIter (operand 0 = out, the
// inputs after it). When every operand is flat (ndim <= 1, stride 1, or stride 0 for a
// broadcast input) and the pointers are aligned, each thread takes kVec elements with one
// vector load per operand; otherwise each element unravels its linear index over the sizes
// (32-bit division when numel < 2^31). Math is in f32 for f32/bf16/f16 storage and in f64 for
// f64, with device_math.cuh's functions (for f32: ports of kernels/cpu/simd.h, IEEE-rounded
// sqrt and division, log and pow through f64), so that CUDA and CPU agree to an ulp or two.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <cuda/std/tuple>
#include <type_traits>
#include <utility>

#include "kernels/cpu/half.h"
#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"

namespace trainyard::kernels::cuda {
namespace {

constexpr int kVec = 4;  // elements per thread on the flat path
constexpr int kThreads = 256;
// Doubles, so that A(k) rounds them as the CPU's static_cast<T> does for f32 and f64 alike.
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

// ---- Activations over the compute type A ----
template <typename A>
__device__ __forceinline__ A Sigmoid(A x) {
  return Div(A(1), A(1) + Exp(-x));
}
template <typename A>
__device__ __forceinline__ A GeluTanh(A x) {
  const A t = Tanh(A(kSqrt2OverPi) * (x + A(0.044715) * x * x * x));
  return A(0.5) * x * (A(1) + t);
}
template <typename A>
__device__ __forceinline__ A GeluTanhGrad(A x) {
  const A k = A(kSqrt2OverPi), c = A(0.044715);
  const A t = Tanh(k * (x + c * x * x * x));
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * x * x);
}

// y = f(x; a, b) for UnaryOp (kernels/cpu/elementwise.h).
template <typename A>
__device__ __forceinline__ A UnaryMath(UnaryOp op, A v, A a, A b) {
  switch (op) {
    case UnaryOp::kCopy:
      return v;
    case UnaryOp::kNeg:
      return -v;
    case UnaryOp::kExp:
      return Exp(v);
    case UnaryOp::kLog:
      return Log(v);
    case UnaryOp::kSqrt:
      return Sqrt(v);
    case UnaryOp::kRsqrt:
      return Div(A(1), Sqrt(v));
    case UnaryOp::kAbs:
      return Abs(v);
    case UnaryOp::kSign:
      return A((v > 0) - (v < 0));
    case UnaryOp::kRelu:
      return v < 0 ? A(0) : v;
    case UnaryOp::kSigmoid:
      return Sigmoid(v);
    case UnaryOp::kTanh:
      return Tanh(v);
    case UnaryOp::kSilu:
      return v * Sigmoid(v);
    case UnaryOp::kGeluTanh:
      return GeluTanh(v);
    case UnaryOp::kGeluErf:
      return A(0.5) * v * (A(1) + Erf(v * A(kInvSqrt2)));
    case UnaryOp::kPow:
      return a == A(2) ? v * v : Pow(v, a);
    case UnaryOp::kClamp: {
      A r = v < a ? a : v;
      r = r > b ? b : r;
      return v != v ? v : r;
    }
    case UnaryOp::kAffine:
      return a * v + b;
  }
  return v;
}

// gx = g * f'(x) (or from y, the forward output), as UnaryBackward in elementwise.cc.
template <typename A>
__device__ __forceinline__ A GradMath(UnaryOp op, A x, A y, A g, A a, A b) {
  switch (op) {
    case UnaryOp::kCopy:
      return g;
    case UnaryOp::kNeg:
      return -g;
    case UnaryOp::kExp:
      return g * y;
    case UnaryOp::kLog:
      return Div(g, x);
    case UnaryOp::kSqrt:
      return Div(g, A(2) * y);
    case UnaryOp::kRsqrt:
      return g * A(-0.5) * y * y * y;
    case UnaryOp::kAbs:
      return g * A((x > 0) - (x < 0));
    case UnaryOp::kSign:
      return A(0);
    case UnaryOp::kRelu:
      return x > 0 ? g : A(0);
    case UnaryOp::kSigmoid:
      return g * y * (A(1) - y);
    case UnaryOp::kTanh:
      return g * (A(1) - y * y);
    case UnaryOp::kSilu: {
      const A s = Sigmoid(x);
      return g * s * (A(1) + x * (A(1) - s));
    }
    case UnaryOp::kGeluTanh:
      return g * GeluTanhGrad(x);
    case UnaryOp::kGeluErf: {
      const A cdf = A(0.5) * (A(1) + Erf(x * A(kInvSqrt2)));
      const A pdf = Exp(A(-0.5) * x * x) * A(kInvSqrt2Pi);
      return g * (cdf + x * pdf);
    }
    case UnaryOp::kPow:
      return a == A(0) ? A(0) : g * a * Pow(x, a - A(1));
    case UnaryOp::kClamp:
      return (x >= a && x <= b) ? g : A(0);
    case UnaryOp::kAffine:
      return g * a;
  }
  return g;
}

// ---- Functors: out = op(in...) on storage values ----
template <typename T>
struct UnaryFn {
  UnaryOp op;
  Acc<T> a, b;
  __device__ T operator()(T x) const { return FromAcc<T>(UnaryMath(op, LoadAcc(&x), a, b)); }
};

// Backward from g alone, or from (p, g) where p is x, or y when kFromY (what the op reads).
template <typename T, bool kFromY>
struct GradFn {
  UnaryOp op;
  Acc<T> a, b;
  __device__ T operator()(T g) const { return Grad(Acc<T>(0), LoadAcc(&g)); }
  __device__ T operator()(T p, T g) const { return Grad(LoadAcc(&p), LoadAcc(&g)); }
  __device__ T Grad(Acc<T> p, Acc<T> g) const {
    const Acc<T> zero(0);
    return FromAcc<T>(GradMath(op, kFromY ? zero : p, kFromY ? p : zero, g, a, b));
  }
};

template <typename T>
struct BinaryFn {
  BinaryOp op;
  Acc<T> alpha;
  __device__ T operator()(T xs, T ys) const {
    const Acc<T> u = LoadAcc(&xs), v = LoadAcc(&ys);
    switch (op) {
      case BinaryOp::kAdd:
        return FromAcc<T>(u + alpha * v);
      case BinaryOp::kSub:
        return FromAcc<T>(u - alpha * v);
      case BinaryOp::kMul:
        return FromAcc<T>(u * v);
      case BinaryOp::kDiv:
        return FromAcc<T>(Div(u, v));
      case BinaryOp::kMaximum:
        return FromAcc<T>(u != u ? u : (v != v ? v : (u > v ? u : v)));
      case BinaryOp::kMinimum:
        return FromAcc<T>(u != u ? u : (v != v ? v : (u < v ? u : v)));
      case BinaryOp::kPow:
        return FromAcc<T>(Pow(u, v));
    }
    return xs;
  }
};

// BinaryFn<float> on inputs of their own types, each converted to f32 on load (exactly).
template <typename X, typename Y>
struct MixedBinaryFn {
  BinaryFn<float> fn;
  __device__ float operator()(X xs, Y ys) const { return fn(Load(&xs), Load(&ys)); }
};

// Compares in the type itself (integers exactly), bf16/f16 through f32 (also exact).
template <typename T>
struct CompareFn {
  CompareOp op;
  template <typename U>
  __device__ static auto Value(U v) {
    if constexpr (std::is_same_v<U, __nv_bfloat16> || std::is_same_v<U, __half>) {
      return Load(&v);
    } else {
      return v;
    }
  }
  __device__ uint8_t operator()(T xs, T ys) const {
    const auto u = Value(xs), v = Value(ys);
    switch (op) {
      case CompareOp::kEq:
        return u == v;
      case CompareOp::kNe:
        return u != v;
      case CompareOp::kLt:
        return u < v;
      case CompareOp::kLe:
        return u <= v;
      case CompareOp::kGt:
        return u > v;
      case CompareOp::kGe:
        return u >= v;
    }
    return 0;
  }
};

// Where moves bits only: B is the unsigned integer of the element's size.
template <typename B>
struct WhereFn {
  __device__ B operator()(uint8_t c, B x, B y) const { return c ? x : y; }
};

// dst = Cast<D>(src) of kernels/cpu/copy.h: 16-bit floats go through f32; to bool is != 0;
// float to uint8 goes through int32, as x86 hosts compile it, so values in int32's range wrap
// as on the CPU. Floats that no integer type holds (NaN, inf, beyond int32 or int64) are
// undefined in C++ and differ: the device saturates (NaN to 0), x86 gives INT_MIN.
template <typename D, typename S>
__device__ __forceinline__ D CastTo(S v) {
  constexpr bool kHalfS = std::is_same_v<S, __nv_bfloat16> || std::is_same_v<S, __half>;
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (kHalfS) {
    return CastTo<D>(Load(&v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_same_v<D, uint8_t> && std::is_floating_point_v<S>) {
    return static_cast<uint8_t>(static_cast<int32_t>(v));
  } else {
    return static_cast<D>(v);
  }
}
template <typename D, typename S>
struct CastFn {
  __device__ D operator()(S v) const { return CastTo<D>(v); }
};

// ---- Launch machinery (Note [Elementwise launches]) ----
template <typename T>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

template <typename T>
__device__ __forceinline__ Pack<T> LoadPack(const T* p, int64_t i, bool bcast) {
  if (!bcast) return *reinterpret_cast<const Pack<T>*>(p + i);
  Pack<T> r;
#pragma unroll
  for (int e = 0; e < kVec; ++e) r.v[e] = p[0];
  return r;
}

template <typename Op, typename Out, typename... In, size_t... K>
__device__ __forceinline__ void ApplyPack(const Op& op, Out* out, int64_t i, unsigned bcast,
                                          std::index_sequence<K...>, const In*... in) {
  const ::cuda::std::tuple<Pack<In>...> p(LoadPack(in, i, (bcast >> K) & 1u)...);
  Pack<Out> r;
#pragma unroll
  for (int e = 0; e < kVec; ++e) r.v[e] = op(::cuda::std::get<K>(p).v[e]...);
  *reinterpret_cast<Pack<Out>*>(out + i) = r;
}

// out[o] = op(in_k[off[k]]...) for one element.
template <typename Op, typename Out, typename... In, size_t... K>
__device__ __forceinline__ void ApplyAt(const Op& op, Out* out, int64_t o, const int64_t* off,
                                        std::index_sequence<K...>, const In*... in) {
  out[o] = op(in[off[K]]...);
}

// Flat operands: thread t of the grid-stride loop takes elements [kVec t, kVec t + kVec); the
// n % kVec tail goes to the first threads of block 0. Bit k of bcast: input k is one element.
template <typename Op, typename Out, typename... In>
__global__ void FlatKernel(int64_t n, unsigned bcast, Op op, Out* out, const In*... in) {
  const int64_t packs = n / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    ApplyPack(op, out, p * kVec, bcast, std::index_sequence_for<In...>{}, in...);
  }
  if (blockIdx.x == 0 && threadIdx.x < n - packs * kVec) {
    const int64_t i = packs * kVec + threadIdx.x;
    int64_t off[sizeof...(In)];
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof...(In)); ++k) off[k] = ((bcast >> k) & 1u) ? 0 : i;
    ApplyAt(op, out, i, off, std::index_sequence_for<In...>{}, in...);
  }
}

// Element offsets of linear index `lin` for the first N operands: lin unravelled over the
// sizes, innermost dim last. The outermost dim needs no division (lin < its size by then).
template <int N, typename I>
__device__ __forceinline__ void OffsetsOf(const StridedIter& it, I lin, int64_t (&off)[N]) {
#pragma unroll
  for (int op = 0; op < N; ++op) off[op] = 0;
#pragma unroll
  for (int d = cpu::kMaxDims - 1; d >= 0; --d) {
    if (d >= it.ndim) continue;
    I c = lin;
    if (d > 0) {
      const I size = static_cast<I>(it.sizes[d]);
      c = lin % size;
      lin /= size;
    }
#pragma unroll
    for (int op = 0; op < N; ++op) off[op] += static_cast<int64_t>(c) * it.strides[op][d];
  }
}

// Any strides; I is uint32_t when numel < 2^31, else int64_t.
template <typename I, typename Op, typename Out, typename... In>
__global__ void StridedKernel(StridedIter it, I n, Op op, Out* out, const In*... in) {
  constexpr int kN = 1 + sizeof...(In);
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I lin = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; lin < n; lin += stride) {
    int64_t off[kN];
    OffsetsOf<kN>(it, lin, off);
    ApplyAt(op, out, off[0], off + 1, std::index_sequence_for<In...>{}, in...);
  }
}

template <typename T>
bool IsAligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(Pack<T>) == 0;
}

// Whether `it` is flat for FlatKernel: ndim <= 1, out stride 1 and each input stride 1 or 0
// (then bit k of *bcast is set), with vector-aligned pointers.
template <typename Out, typename... In, size_t... K>
bool IsFlat(const StridedIter& it, unsigned* bcast, std::index_sequence<K...>, const Out* out,
            const In*... in) {
  if (it.ndim > 1 || (it.ndim == 1 && it.strides[0][0] != 1) || !IsAligned(out)) return false;
  bool ok = true;
  auto input = [&](int k, bool aligned) {
    const int64_t stride = it.ndim == 0 ? 0 : it.strides[k + 1][0];
    if (stride == 0) {
      *bcast |= 1u << k;
    } else {
      ok = ok && stride == 1 && aligned;
    }
  };
  (input(static_cast<int>(K), IsAligned(in)), ...);
  return ok;
}

// out = op(in...) over `it` (operand 0 = out, operand k + 1 = in k), asynchronously on stream.
template <typename Op, typename Out, typename... In>
void Launch(const char* name, const StridedIter& it, cudaStream_t stream, const Op& op, Out* out,
            const In*... in) {
  const int64_t n = it.numel();
  if (n == 0) return;
  unsigned bcast = 0;
  if (IsFlat(it, &bcast, std::index_sequence_for<In...>{}, out, in...)) {
    FlatKernel<<<BlocksFor((n + kVec - 1) / kVec, kThreads), kThreads, 0, stream>>>(n, bcast, op,
                                                                                    out, in...);
  } else if (n < (int64_t{1} << 31)) {
    StridedKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(it, static_cast<uint32_t>(n), op,
                                                                   out, in...);
  } else {
    StridedKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(it, n, op, out, in...);
  }
  CheckLaunch(name);
}

// A flat iterator over n contiguous elements of `nops` operands.
StridedIter FlatIter(int64_t n, int nops) {
  StridedIter it;
  it.ndim = 1;
  it.nops = nops;
  it.sizes[0] = n;
  for (int op = 0; op < nops; ++op) it.strides[op][0] = 1;
  return it;
}

size_t SizeOf(ScalarType t) {
  switch (t) {
    case ScalarType::kF64:
    case ScalarType::kI64:
      return 8;
    case ScalarType::kF32:
    case ScalarType::kI32:
      return 4;
    case ScalarType::kBF16:
    case ScalarType::kF16:
      return 2;
    case ScalarType::kU8:
    case ScalarType::kBool:
      return 1;
  }
  TY_CHECK(false) << "unknown dtype " << static_cast<int>(t);
  return 0;
}

// fn(Tag<T>) for the storage type of every ScalarType (bool is bool).
template <typename F>
void DispatchAll(ScalarType t, const char* name, F&& fn) {
  switch (t) {
    case ScalarType::kF32:
      return fn(Tag<float>{});
    case ScalarType::kF64:
      return fn(Tag<double>{});
    case ScalarType::kBF16:
      return fn(Tag<__nv_bfloat16>{});
    case ScalarType::kF16:
      return fn(Tag<__half>{});
    case ScalarType::kI64:
      return fn(Tag<int64_t>{});
    case ScalarType::kI32:
      return fn(Tag<int32_t>{});
    case ScalarType::kU8:
      return fn(Tag<uint8_t>{});
    case ScalarType::kBool:
      return fn(Tag<bool>{});
  }
  TY_CHECK(false) << name << ": unknown dtype " << static_cast<int>(t);
}

// fn(Tag<B>) for the unsigned integer B of an element size in bytes.
template <typename F>
void DispatchBits(size_t size, F&& fn) {
  switch (size) {
    case 1:
      return fn(Tag<uint8_t>{});
    case 2:
      return fn(Tag<uint16_t>{});
    case 4:
      return fn(Tag<uint32_t>{});
    case 8:
      return fn(Tag<uint64_t>{});
  }
  TY_CHECK(false) << "element size " << size;
}

template <typename B>
__global__ void FillKernel(int64_t n, B* out, B value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = value;
}

// The bits of `value` in type t, as the CPU's Cast<U>(double) (device_kernels.cc) makes them.
uint64_t FillBits(ScalarType t, double value) {
  uint64_t bits = 0;
  auto put = [&bits](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (t) {
    case ScalarType::kF32:
      put(static_cast<float>(value));
      break;
    case ScalarType::kF64:
      put(value);
      break;
    case ScalarType::kBF16:
      put(ToBFloat16(static_cast<float>(value)).bits);
      break;
    case ScalarType::kF16:
      put(ToHalf(static_cast<float>(value)).bits);
      break;
    case ScalarType::kI64:
      put(static_cast<int64_t>(value));
      break;
    case ScalarType::kI32:
      put(static_cast<int32_t>(value));
      break;
    case ScalarType::kU8:
      put(static_cast<uint8_t>(static_cast<int64_t>(value)));
      break;
    case ScalarType::kBool:
      put(static_cast<uint8_t>(value != 0 ? 1 : 0));
      break;
  }
  return bits;
}

}  // namespace

void CudaBackendImpl::Copy(const StridedIter& it, ScalarType dst_type, void* dst,
                           ScalarType src_type, const void* src, Stream stream) {
  const int64_t n = it.numel();
  if (n == 0) return;
  const cudaStream_t s = AsStream(stream);
  if (dst_type == src_type) {
    const size_t size = SizeOf(dst_type);
    if (it.ndim == 0 || (it.ndim == 1 && it.strides[0][0] == 1 && it.strides[1][0] == 1)) {
      TY_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * size, cudaMemcpyDeviceToDevice, s));
      return;
    }
    DispatchBits(size, [&](auto b) {
      using B = typename decltype(b)::type;
      Launch("copy", it, s, CastFn<B, B>{}, static_cast<B*>(dst), static_cast<const B*>(src));
    });
    return;
  }
  DispatchAll(dst_type, "copy", [&](auto d) {
    DispatchAll(src_type, "copy", [&](auto sr) {
      using D = typename decltype(d)::type;
      using S = typename decltype(sr)::type;
      if constexpr (!std::is_same_v<D, S>) {
        Launch("copy", it, s, CastFn<D, S>{}, static_cast<D*>(dst), static_cast<const S*>(src));
      }
    });
  });
}

void CudaBackendImpl::Fill(ScalarType type, int64_t n, void* out, double value, Stream stream) {
  if (n <= 0) return;
  const size_t size = SizeOf(type);
  const uint64_t bits = FillBits(type, value);
  // One repeated byte (zeros, most often): a memset.
  bool same_bytes = true;
  for (size_t i = 1; i < size; ++i)
    same_bytes = same_bytes && ((bits >> (8 * i)) & 0xff) == (bits & 0xff);
  if (same_bytes) {
    TY_CUDA_CHECK(cudaMemsetAsync(out, static_cast<int>(bits & 0xff), static_cast<size_t>(n) * size,
                                  AsStream(stream)));
    return;
  }
  DispatchBits(size, [&](auto b) {
    using B = typename decltype(b)::type;
    FillKernel<<<BlocksFor(n, kThreads), kThreads, 0, AsStream(stream)>>>(n, static_cast<B*>(out),
                                                                          static_cast<B>(bits));
  });
  CheckLaunch("fill");
}

void CudaBackendImpl::Unary(UnaryOp op, ScalarType type, const StridedIter& it, void* out,
                            const void* x, double alpha, double beta, Stream stream) {
  DispatchDtype<DtypeSet::kFloatF64>(type, "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const UnaryFn<T> fn{op, static_cast<Acc<T>>(alpha), static_cast<Acc<T>>(beta)};
    Launch("unary", it, AsStream(stream), fn, static_cast<T*>(out), static_cast<const T*>(x));
  });
}

void CudaBackendImpl::UnaryBackward(UnaryOp op, ScalarType type, int64_t n, const void* x,
                                    const void* y, const void* g, void* gx, double alpha,
                                    double beta, Stream stream) {
  DispatchDtype<DtypeSet::kFloatF64>(type, "unary backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Acc<T> a = static_cast<Acc<T>>(alpha), b = static_cast<Acc<T>>(beta);
    const auto* xt = static_cast<const T*>(x);
    const auto* yt = static_cast<const T*>(y);
    const auto* gt = static_cast<const T*>(g);
    auto* out = static_cast<T*>(gx);
    const cudaStream_t s = AsStream(stream);
    switch (op) {
      case UnaryOp::kExp:
      case UnaryOp::kSqrt:
      case UnaryOp::kRsqrt:
      case UnaryOp::kSigmoid:
      case UnaryOp::kTanh:
        TY_CHECK(y != nullptr) << "unary backward: op " << static_cast<int>(op) << " needs y";
        return Launch("unary backward", FlatIter(n, 3), s, GradFn<T, true>{op, a, b}, out, yt, gt);
      case UnaryOp::kCopy:
      case UnaryOp::kNeg:
      case UnaryOp::kSign:
      case UnaryOp::kAffine:
        return Launch("unary backward", FlatIter(n, 2), s, GradFn<T, false>{op, a, b}, out, gt);
      default:
        return Launch("unary backward", FlatIter(n, 3), s, GradFn<T, false>{op, a, b}, out, xt, gt);
    }
  });
}

void CudaBackendImpl::Binary(BinaryOp op, ScalarType type, const StridedIter& it, void* out,
                             const void* x, const void* y, double alpha, Stream stream) {
  DispatchDtype<DtypeSet::kFloatF64>(type, "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    Launch("binary", it, AsStream(stream), BinaryFn<T>{op, static_cast<Acc<T>>(alpha)},
           static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(y));
  });
}

void CudaBackendImpl::BinaryMixed(BinaryOp op, ScalarType x_type, ScalarType y_type,
                                  const StridedIter& it, float* out, const void* x, const void* y,
                                  double alpha, Stream stream) {
  TY_CHECK(x_type != y_type) << "binary (mixed): both inputs are " << static_cast<int>(x_type)
                             << "; use Binary";
  DispatchDtype<DtypeSet::kFloat>(x_type, "binary (mixed)", [&](auto xtag) {
    using X = typename decltype(xtag)::type;
    DispatchDtype<DtypeSet::kFloat>(y_type, "binary (mixed)", [&](auto ytag) {
      using Y = typename decltype(ytag)::type;
      Launch("binary (mixed)", it, AsStream(stream),
             MixedBinaryFn<X, Y>{BinaryFn<float>{op, static_cast<float>(alpha)}}, out,
             static_cast<const X*>(x), static_cast<const Y*>(y));
    });
  });
}

void CudaBackendImpl::Compare(CompareOp op, ScalarType type, const StridedIter& it, uint8_t* out,
                              const void* x, const void* y, Stream stream) {
  DispatchAll(type == ScalarType::kBool ? ScalarType::kU8 : type, "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    Launch("compare", it, AsStream(stream), CompareFn<T>{op}, out, static_cast<const T*>(x),
           static_cast<const T*>(y));
  });
}

void CudaBackendImpl::Where(ScalarType type, const StridedIter& it, void* out, const uint8_t* cond,
                            const void* x, const void* y, Stream stream) {
  DispatchBits(SizeOf(type), [&](auto b) {
    using B = typename decltype(b)::type;
    Launch("where", it, AsStream(stream), WhereFn<B>{}, static_cast<B*>(out), cond,
           static_cast<const B*>(x), static_cast<const B*>(y));
  });
}

}  // namespace trainyard::kernels::cuda
