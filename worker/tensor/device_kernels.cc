// device_kernels.h: elementwise, random fills, reductions.
#include "worker/tensor/device_kernels.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/copy.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/random.h"
#include "kernels/cpu/reduce.h"
#include "worker/tensor/device_kernels_internal.h"

namespace trainyard::device {

namespace kc = kernels::cpu;
using internal::B;
using internal::DataOrNull;
using internal::Ptr;
using internal::S;
using internal::T;

namespace {
// Fills contiguous memory through an integer view of the bits for 16-bit and bool types.
template <typename U>
void FillTyped(void* p, int64_t n, double value) {
  U v = kc::Cast<U>(value);
  if constexpr (std::is_same_v<U, BFloat16> || std::is_same_v<U, Half>) {
    kc::Fill<uint16_t>(n, static_cast<uint16_t*>(p), v.bits);
  } else if constexpr (std::is_same_v<U, bool>) {
    kc::Fill<uint8_t>(n, static_cast<uint8_t*>(p), v ? 1 : 0);
  } else {
    kc::Fill<U>(n, static_cast<U*>(p), v);
  }
}
}  // namespace

DType StatsDType(Device device, DType dtype) { return device.is_cuda() ? DType::kFloat32 : dtype; }

bool ComputesIn(Device device, DType dtype) {
  if (device.is_cuda()) {
    return dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
  }
  return dtype == DType::kFloat32 || dtype == DType::kFloat64;
}

void Fill(const Tensor& out, double value) {
  if (out.device().is_cuda()) {
    B().Fill(T(out), out.numel(), out.raw_data(), value, S(out));
    return;
  }
  TY_DISPATCH_ALL(out.dtype(), "fill",
                  [&] { FillTyped<scalar_t>(out.raw_data(), out.numel(), value); });
}

void Unary(UnaryOp op, const StridedIter& it, const Tensor& out, const Tensor& x, double alpha,
           double beta) {
  if (out.device().is_cuda()) {
    B().Unary(op, T(x), it, out.raw_data(), x.raw_data(), alpha, beta, S(out));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "unary", [&] {
    kc::Unary<scalar_t>(op, it, out.data<scalar_t>(), x.data<scalar_t>(),
                        static_cast<scalar_t>(alpha), static_cast<scalar_t>(beta));
  });
}

void UnaryBackward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& g, const Tensor& gx,
                   double alpha, double beta) {
  if (x.device().is_cuda()) {
    B().UnaryBackward(op, T(x), x.numel(), x.raw_data(), Ptr(y), g.raw_data(), gx.raw_data(), alpha,
                      beta, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "unary backward", [&] {
    kc::UnaryBackward<scalar_t>(op, x.numel(), x.data<scalar_t>(), DataOrNull<scalar_t>(y),
                                g.data<scalar_t>(), gx.data<scalar_t>(),
                                static_cast<scalar_t>(alpha), static_cast<scalar_t>(beta));
  });
}

void Binary(BinaryOp op, const StridedIter& it, const Tensor& out, const Tensor& x, const Tensor& y,
            double alpha) {
  if (out.device().is_cuda()) {
    B().Binary(op, T(x), it, out.raw_data(), x.raw_data(), y.raw_data(), alpha, S(out));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "binary", [&] {
    kc::Binary<scalar_t>(op, it, out.data<scalar_t>(), x.data<scalar_t>(), y.data<scalar_t>(),
                         static_cast<scalar_t>(alpha));
  });
}

void BinaryMixed(BinaryOp op, const StridedIter& it, const Tensor& out, const Tensor& x,
                 const Tensor& y, double alpha) {
  TY_CHECK(out.device().is_cuda() && out.dtype() == DType::kFloat32)
      << "binary (mixed): out is " << DTypeName(out.dtype()) << " on " << out.device().ToString();
  B().BinaryMixed(op, T(x), T(y), it, out.data<float>(), x.raw_data(), y.raw_data(), alpha, S(out));
}

void Compare(CompareOp op, const StridedIter& it, const Tensor& out, const Tensor& x,
             const Tensor& y) {
  auto* o = static_cast<uint8_t*>(out.raw_data());
  if (out.device().is_cuda()) {
    B().Compare(op, T(x), it, o, x.raw_data(), y.raw_data(), S(out));
    return;
  }
  switch (x.dtype()) {
    case DType::kFloat32:
      return kc::Compare(op, it, o, x.data<float>(), y.data<float>());
    case DType::kFloat64:
      return kc::Compare(op, it, o, x.data<double>(), y.data<double>());
    case DType::kInt64:
      return kc::Compare(op, it, o, x.data<int64_t>(), y.data<int64_t>());
    case DType::kInt32:
      return kc::Compare(op, it, o, x.data<int32_t>(), y.data<int32_t>());
    case DType::kUInt8:
    case DType::kBool:
      return kc::Compare(op, it, o, static_cast<const uint8_t*>(x.raw_data()),
                         static_cast<const uint8_t*>(y.raw_data()));
    default:
      TY_CHECK(false) << "compare: dtype " << DTypeName(x.dtype()) << " is not supported on cpu";
  }
}

void Where(const StridedIter& it, const Tensor& out, const Tensor& cond, const Tensor& x,
           const Tensor& y) {
  const auto* c = static_cast<const uint8_t*>(cond.raw_data());
  if (out.device().is_cuda()) {
    B().Where(T(x), it, out.raw_data(), c, x.raw_data(), y.raw_data(), S(out));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "where", [&] {
    kc::Where<scalar_t>(it, out.data<scalar_t>(), c, x.data<scalar_t>(), y.data<scalar_t>());
  });
}

void FillUniform(const Tensor& out, uint64_t seed, uint64_t offset, double lo, double hi) {
  if (out.device().is_cuda()) {
    B().FillUniform(T(out), out.numel(), out.raw_data(), seed, offset, lo, hi, S(out));
    return;
  }
  TY_DISPATCH_FLOATING(out.dtype(), "uniform", [&] {
    kc::FillUniform<scalar_t>(out.numel(), out.data<scalar_t>(), seed, offset,
                              static_cast<scalar_t>(lo), static_cast<scalar_t>(hi));
  });
}

void FillNormal(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double std) {
  if (out.device().is_cuda()) {
    B().FillNormal(T(out), out.numel(), out.raw_data(), seed, offset, mean, std, S(out));
    return;
  }
  TY_DISPATCH_FLOATING(out.dtype(), "normal", [&] {
    kc::FillNormal<scalar_t>(out.numel(), out.data<scalar_t>(), seed, offset,
                             static_cast<scalar_t>(mean), static_cast<scalar_t>(std));
  });
}

void FillBernoulli(const Tensor& mask, uint64_t seed, uint64_t offset, double p_keep) {
  auto* m = static_cast<uint8_t*>(mask.raw_data());
  if (mask.device().is_cuda()) {
    B().FillBernoulli(mask.numel(), m, seed, offset, p_keep, S(mask));
    return;
  }
  kc::FillBernoulli(mask.numel(), m, seed, offset, p_keep);
}

void ReduceSum(const Tensor& x, const Tensor& out, int64_t outer, int64_t k, int64_t inner,
               double scale) {
  if (x.device().is_cuda()) {
    B().ReduceSum(T(x), x.raw_data(), out.raw_data(), outer, k, inner, scale, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "sum", [&] {
    kc::ReduceSum<scalar_t>(x.data<scalar_t>(), out.data<scalar_t>(), outer, k, inner,
                            static_cast<scalar_t>(scale));
  });
}

void ReduceMaxMin(bool is_max, const Tensor& x, const Tensor& out, const Tensor& idx, int64_t outer,
                  int64_t k, int64_t inner) {
  if (x.device().is_cuda()) {
    B().ReduceMaxMin(is_max, T(x), x.raw_data(), out.raw_data(), DataOrNull<int64_t>(idx), outer, k,
                     inner, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), (is_max ? "max" : "min"), [&] {
    kc::ReduceMaxMin<scalar_t>(is_max, x.data<scalar_t>(), out.data<scalar_t>(),
                               DataOrNull<int64_t>(idx), outer, k, inner);
  });
}

void NormPowInto(const Tensor& x, double p, const Tensor& out, int64_t index) {
  TY_CHECK(out.dtype() == DType::kFloat64 && index >= 0 && index < out.numel())
      << "NormPowInto: out must be a float64 tensor with an entry " << index;
  const bool inf = std::isinf(p);
  if (x.device().is_cuda()) {
    B().NormPow(T(x), x.raw_data(), x.numel(), inf ? 0 : p, out.data<double>() + index, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "norm", [&] {
    out.data<double>()[index] = inf ? kc::MaxAbs(x.data<scalar_t>(), x.numel())
                                    : kc::SumAbsPow(x.data<scalar_t>(), x.numel(), p);
  });
}

}  // namespace trainyard::device
