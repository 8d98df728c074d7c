#include "worker/ops/elementwise.h"

#include <limits>

#include "kernels/cpu/elementwise.h"
#include "worker/autograd/grad_mode.h"
#include "worker/ops/common.h"
#include "worker/ops/record.h"
#include "worker/ops/views.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

Tensor BinaryForward(kc::BinaryOp op, const Tensor& a, const Tensor& b, double alpha,
                     const char* name) {
  CheckSameFloating(a, b, name);
  Shape shape = BroadcastShapes(a.shape(), b.shape(), name);
  Tensor out = Empty(shape, a.options());
  device::Binary(op, IterFor(shape, {&out, &a, &b}), out, a, b, alpha);
  return out;
}

Tensor UnaryForward(kc::UnaryOp op, const Tensor& x, double alpha, double beta, const char* name) {
  CheckFloating(x, name);
  Tensor out = Empty(x.shape(), x.options());
  device::Unary(op, IterFor(x.shape(), {&out, &x}), out, x, alpha, beta);
  return out;
}

Tensor CompareForward(kc::CompareOp op, const Tensor& a, const Tensor& b, const char* name) {
  TY_CHECK(a.dtype() == b.dtype()) << name << ": dtypes differ (" << DTypeName(a.dtype()) << " and "
                                   << DTypeName(b.dtype()) << ")";
  Shape shape = BroadcastShapes(a.shape(), b.shape(), name);
  CheckSameDevice(a, b, name);
  Tensor out = Empty(shape, Options(DType::kBool).set_device(a.device()));
  device::Compare(op, IterFor(shape, {&out, &a, &b}), out, a, b);
  return out;
}

// Records the backward of a unary kernel op: gx = g * f'(x) through kc::UnaryBackward.
void RecordUnary(kc::UnaryOp op, const Tensor& x, const Tensor& out, double alpha, double beta,
                 const char* node_name, bool save_output) {
  auto node = Record(node_name, {&x}, [op, alpha, beta, save_output](Node& n, GradList&& g) {
    Tensor xs = ContiguousData(n.saved(0));
    Tensor ys = save_output ? ContiguousData(n.saved(1)) : Tensor();
    Tensor gc = ContiguousData(g[0]);
    Tensor gx = Empty(xs.shape(), xs.options());
    device::UnaryBackward(op, xs, ys, gc, gx, alpha, beta);
    return GradList{gx};
  });
  node->Save(x);
  if (save_output) node->Save(out, /*is_output=*/true);
  SetHistory(out, node);
}

// In-place updates are not recorded, so neither side may need a gradient while grad mode
// is on (the update would be lost to autograd); `other` may be undefined.
void CheckInPlace(const Tensor& self, const char* name, const Tensor& other = Tensor()) {
  const bool grad = autograd::GradMode::IsEnabled();
  TY_CHECK(!(grad && self.requires_grad()))
      << name << ": a tensor that requires grad cannot be modified in place while grad mode "
      << "is on; wrap the update in NoGradGuard or use the out-of-place op";
  TY_CHECK(!(grad && other.defined() && other.requires_grad()))
      << name << ": the operand requires grad, but in-place updates are not recorded; use the "
      << "out-of-place op";
}

// The broadcast of self and other must be self's shape (other broadcasts to self).
void CheckBroadcastsTo(const Tensor& self, const Tensor& other, const char* name) {
  TY_CHECK(BroadcastShapes(self.shape(), other.shape(), name) == self.shape())
      << name << ": shape " << other.shape() << " does not broadcast to " << self.shape();
}

// Whether a and b are on one CUDA device with two different types among f32, bf16 and f16
// (promoting to f32), which the device's kernels read as they are (device::BinaryMixed).
bool MixedOnDevice(const Tensor& a, const Tensor& b) {
  auto low_or_f32 = [](DType d) {
    return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
  };
  return a.defined() && b.defined() && a.device().is_cuda() && a.device() == b.device() &&
         a.dtype() != b.dtype() && low_or_f32(a.dtype()) && low_or_f32(b.dtype());
}

// a + alpha * b in f32 from inputs of two types, as an add through an f32 copy of the narrower
// computes it, bit for bit, without the copy (a residual stream's add of a bf16 branch under
// autocast).
Tensor MixedAddForward(const Tensor& a, const Tensor& b, double alpha) {
  const Shape shape = BroadcastShapes(a.shape(), b.shape(), "add");
  Tensor out = Empty(shape, a.options().set_dtype(DType::kFloat32));
  device::BinaryMixed(kc::BinaryOp::kAdd, IterFor(shape, {&out, &a, &b}), out, a, b, alpha);
  return out;
}

}  // namespace

namespace internal {
Tensor UnaryOp(int op, const Tensor& x, double alpha, double beta, const char* node_name,
               bool save_output) {
  auto kop = static_cast<kc::UnaryOp>(op);
  Tensor out = UnaryForward(kop, x, alpha, beta, node_name);
  if (ShouldRecord({&x})) RecordUnary(kop, x, out, alpha, beta, node_name, save_output);
  return out;
}
}  // namespace internal

Tensor Add(const Tensor& a0, const Tensor& b0, double alpha) {
  // Inputs of two types the device reads as they are (MixedOnDevice) are not promoted first:
  // their gradients are rounded to their own types here, as a promoting copy's backward would.
  const bool mixed = MixedOnDevice(a0, b0);
  const Tensor a = mixed ? a0 : PromoteTo(a0, b0);
  const Tensor b = mixed ? b0 : PromoteTo(b0, a0);
  Tensor out =
      mixed ? MixedAddForward(a, b, alpha) : BinaryForward(kc::BinaryOp::kAdd, a, b, alpha, "add");
  if (ShouldRecord({&a, &b})) {
    auto node = Record("AddBackward0", {&a, &b},
                       [sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype(), alpha](
                           Node& n, GradList&& g) {
                         auto as = [](const Tensor& t, DType d) {
                           return t.dtype() == d ? t : ConvertTo(t, d);
                         };
                         GradList r(2);
                         if (NeedsGrad(n, 0)) r[0] = as(SumToShape(g[0], sa), da);
                         if (NeedsGrad(n, 1)) {
                           const Tensor gb = alpha == 1 ? g[0] : MulScalar(g[0], alpha);
                           r[1] = as(SumToShape(gb, sb), db);
                         }
                         return r;
                       });
    SetHistory(out, node);
  }
  return out;
}

Tensor Sub(const Tensor& a0, const Tensor& b0, double alpha) {
  const Tensor a = PromoteTo(a0, b0);
  const Tensor b = PromoteTo(b0, a0);
  Tensor out = BinaryForward(kc::BinaryOp::kSub, a, b, alpha, "sub");
  if (ShouldRecord({&a, &b})) {
    auto node = Record("SubBackward0", {&a, &b},
                       [sa = a.shape(), sb = b.shape(), alpha](Node& n, GradList&& g) {
                         GradList r(2);
                         if (NeedsGrad(n, 0)) r[0] = SumToShape(g[0], sa);
                         if (NeedsGrad(n, 1)) r[1] = SumToShape(MulScalar(g[0], -alpha), sb);
                         return r;
                       });
    SetHistory(out, node);
  }
  return out;
}

Tensor Mul(const Tensor& a0, const Tensor& b0) {
  const Tensor a = PromoteTo(a0, b0);
  const Tensor b = PromoteTo(b0, a0);
  Tensor out = BinaryForward(kc::BinaryOp::kMul, a, b, 1, "mul");
  if (ShouldRecord({&a, &b})) {
    auto node =
        Record("MulBackward0", {&a, &b}, [sa = a.shape(), sb = b.shape()](Node& n, GradList&& g) {
          GradList r(2);
          if (NeedsGrad(n, 0)) r[0] = SumToShape(Mul(g[0], n.saved(1)), sa);
          if (NeedsGrad(n, 1)) r[1] = SumToShape(Mul(g[0], n.saved(0)), sb);
          return r;
        });
    node->Save(a);
    node->Save(b);
    SetHistory(out, node);
  }
  return out;
}

Tensor Div(const Tensor& a0, const Tensor& b0) {
  const Tensor a = PromoteTo(a0, b0);
  const Tensor b = PromoteTo(b0, a0);
  Tensor out = BinaryForward(kc::BinaryOp::kDiv, a, b, 1, "div");
  if (ShouldRecord({&a, &b})) {
    auto node =
        Record("DivBackward0", {&a, &b}, [sa = a.shape(), sb = b.shape()](Node& n, GradList&& g) {
          GradList r(2);
          const Tensor& bv = n.saved(1);
          if (NeedsGrad(n, 0)) r[0] = SumToShape(Div(g[0], bv), sa);
          if (NeedsGrad(n, 1)) {
            // d(a/b)/db = -a / b^2
            Tensor t = Div(Mul(g[0], n.saved(0)), Mul(bv, bv));
            r[1] = SumToShape(Neg(t), sb);
          }
          return r;
        });
    node->Save(a);
    node->Save(b);
    SetHistory(out, node);
  }
  return out;
}

namespace {
// Maximum/minimum: the gradient goes to the winner; ties split it in half, as in PyTorch.
Tensor MaxMin(const Tensor& a0, const Tensor& b0, bool is_max) {
  const Tensor a = PromoteTo(a0, b0);
  const Tensor b = PromoteTo(b0, a0);
  Tensor out = BinaryForward(is_max ? kc::BinaryOp::kMaximum : kc::BinaryOp::kMinimum, a, b, 1,
                             is_max ? "maximum" : "minimum");
  if (ShouldRecord({&a, &b})) {
    auto node = Record(is_max ? "MaximumBackward0" : "MinimumBackward0", {&a, &b},
                       [sa = a.shape(), sb = b.shape(), is_max](Node& n, GradList&& g) {
                         const Tensor& x = n.saved(0);
                         const Tensor& y = n.saved(1);
                         Tensor half = MulScalar(g[0], 0.5);
                         Tensor zero = ZerosLike(half);
                         Tensor eq = Eq(x, y);
                         Tensor a_wins = is_max ? Gt(x, y) : Lt(x, y);
                         Tensor b_wins = is_max ? Lt(x, y) : Gt(x, y);
                         GradList r(2);
                         if (NeedsGrad(n, 0))
                           r[0] = SumToShape(Where(a_wins, g[0], Where(eq, half, zero)), sa);
                         if (NeedsGrad(n, 1))
                           r[1] = SumToShape(Where(b_wins, g[0], Where(eq, half, zero)), sb);
                         return r;
                       });
    node->Save(a);
    node->Save(b);
    SetHistory(out, node);
  }
  return out;
}
}  // namespace

Tensor Maximum(const Tensor& a, const Tensor& b) { return MaxMin(a, b, true); }
Tensor Minimum(const Tensor& a, const Tensor& b) { return MaxMin(a, b, false); }

Tensor Pow(const Tensor& a0, const Tensor& b0) {
  const Tensor a = PromoteTo(a0, b0);
  const Tensor b = PromoteTo(b0, a0);
  Tensor out = BinaryForward(kc::BinaryOp::kPow, a, b, 1, "pow");
  if (ShouldRecord({&a, &b})) {
    auto node =
        Record("PowBackward1", {&a, &b}, [sa = a.shape(), sb = b.shape()](Node& n, GradList&& g) {
          const Tensor& x = n.saved(0);
          const Tensor& y = n.saved(1);
          const Tensor& z = n.saved(2);
          GradList r(2);
          if (NeedsGrad(n, 0)) {
            // y * x^(y-1); where y == 0 the gradient is 0 (as in PyTorch)
            Tensor d = Mul(y, Pow(x, AddScalar(y, -1)));
            Tensor zero = ZerosLike(d);
            d = Where(Eq(y, ZerosLike(y)), zero, d);
            r[0] = SumToShape(Mul(g[0], d), sa);
          }
          if (NeedsGrad(n, 1)) {
            // z * log(x); where x == 0 and y >= 0 the gradient is 0
            Tensor d = Mul(z, Log(x));
            Tensor x_zero = To(Eq(x, ZerosLike(x)), x.dtype());
            Tensor y_nonneg = To(Ge(y, ZerosLike(y)), y.dtype());
            Tensor mask = GtScalar(Mul(x_zero, y_nonneg), 0.5);
            d = Where(mask, ZerosLike(d), d);
            r[1] = SumToShape(Mul(g[0], d), sb);
          }
          return r;
        });
    node->Save(a);
    node->Save(b);
    node->Save(out, /*is_output=*/true);
    SetHistory(out, node);
  }
  return out;
}

Tensor AddScalar(const Tensor& a, double s) {
  Tensor out = UnaryForward(kc::UnaryOp::kAffine, a, 1, s, "add");
  if (ShouldRecord({&a})) {
    auto node = Record("AddBackward1", {&a}, [](Node&, GradList&& g) { return GradList{g[0]}; });
    SetHistory(out, node);
  }
  return out;
}

Tensor MulScalar(const Tensor& a, double s) {
  Tensor out = UnaryForward(kc::UnaryOp::kAffine, a, s, 0, "mul");
  if (ShouldRecord({&a})) {
    auto node = Record("MulBackward1", {&a},
                       [s](Node&, GradList&& g) { return GradList{MulScalar(g[0], s)}; });
    SetHistory(out, node);
  }
  return out;
}

Tensor Pow(const Tensor& a_in, double exponent) {
  const Tensor a = AutocastF32(a_in);
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kPow), a, exponent, 0, "PowBackward0",
                           false);
}
Tensor Neg(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kNeg), x, 0, 0, "NegBackward0", false);
}
Tensor Exp(const Tensor& x_in) {
  const Tensor x = AutocastF32(x_in);
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kExp), x, 0, 0, "ExpBackward0", true);
}
Tensor Log(const Tensor& x_in) {
  const Tensor x = AutocastF32(x_in);
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kLog), x, 0, 0, "LogBackward0", false);
}
Tensor Sqrt(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kSqrt), x, 0, 0, "SqrtBackward0", true);
}
Tensor Rsqrt(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kRsqrt), x, 0, 0, "RsqrtBackward0", true);
}
Tensor Abs(const Tensor& x) {
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kAbs), x, 0, 0, "AbsBackward0", false);
}
Tensor Clamp(const Tensor& x, double lo, double hi) {
  return internal::UnaryOp(static_cast<int>(kc::UnaryOp::kClamp), x, lo, hi, "ClampBackward1",
                           false);
}

Tensor Where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  const Tensor a = PromoteTo(a0, b0);
  const Tensor b = PromoteTo(b0, a0);
  TY_CHECK(cond.dtype() == DType::kBool || cond.dtype() == DType::kUInt8)
      << "where: condition must be bool or uint8, got " << DTypeName(cond.dtype());
  CheckSameFloating(a, b, "where");
  CheckSameDevice(cond, a, "where");
  Shape shape =
      BroadcastShapes(BroadcastShapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = Empty(shape, a.options());
  device::Where(IterFor(shape, {&out, &cond, &a, &b}), out, cond, a, b);
  if (ShouldRecord({&a, &b})) {
    auto node =
        Record("WhereBackward0", {&a, &b}, [sa = a.shape(), sb = b.shape()](Node& n, GradList&& g) {
          const Tensor& c = n.saved(0);
          Tensor zero = ZerosLike(g[0]);
          GradList r(2);
          if (NeedsGrad(n, 0)) r[0] = SumToShape(Where(c, g[0], zero), sa);
          if (NeedsGrad(n, 1)) r[1] = SumToShape(Where(c, zero, g[0]), sb);
          return r;
        });
    node->Save(cond);
    SetHistory(out, node);
  }
  return out;
}

Tensor Eq(const Tensor& a, const Tensor& b) {
  return CompareForward(kc::CompareOp::kEq, a, b, "eq");
}
Tensor Ne(const Tensor& a, const Tensor& b) {
  return CompareForward(kc::CompareOp::kNe, a, b, "ne");
}
Tensor Lt(const Tensor& a, const Tensor& b) {
  return CompareForward(kc::CompareOp::kLt, a, b, "lt");
}
Tensor Le(const Tensor& a, const Tensor& b) {
  return CompareForward(kc::CompareOp::kLe, a, b, "le");
}
Tensor Gt(const Tensor& a, const Tensor& b) {
  return CompareForward(kc::CompareOp::kGt, a, b, "gt");
}
Tensor Ge(const Tensor& a, const Tensor& b) {
  return CompareForward(kc::CompareOp::kGe, a, b, "ge");
}
Tensor GtScalar(const Tensor& a, double s) { return Gt(a, Scalar(s, a.options())); }

void AddInPlace(const Tensor& self, const Tensor& other, double alpha) {
  CheckInPlace(self, "add_", other);
  CheckSameFloating(self, other, "add_");
  CheckBroadcastsTo(self, other, "add_");
  device::Binary(kc::BinaryOp::kAdd, IterFor(self.shape(), {&self, &self, &other}), self, self,
                 other, alpha);
  self.BumpVersion();
}

void MulInPlace(const Tensor& self, const Tensor& other) {
  CheckInPlace(self, "mul_", other);
  CheckSameFloating(self, other, "mul_");
  CheckBroadcastsTo(self, other, "mul_");
  device::Binary(kc::BinaryOp::kMul, IterFor(self.shape(), {&self, &self, &other}), self, self,
                 other, 1);
  self.BumpVersion();
}

namespace {
void AffineInPlace(const Tensor& self, double a, double b, const char* name) {
  CheckInPlace(self, name);
  CheckFloating(self, name);
  device::Unary(kc::UnaryOp::kAffine, IterFor(self.shape(), {&self, &self}), self, self, a, b);
  self.BumpVersion();
}
}  // namespace

void MulScalarInPlace(const Tensor& self, double s) { AffineInPlace(self, s, 0, "mul_"); }
void AddScalarInPlace(const Tensor& self, double s) { AffineInPlace(self, 1, s, "add_"); }

void ZeroInPlace(const Tensor& self) {
  CheckInPlace(self, "zero_");
  FillInPlace(self, 0);
}

void CopyInPlace(const Tensor& self, const Tensor& src) {
  CheckInPlace(self, "copy_", src);
  CopyInto(self, src);
}

}  // namespace trainyard::ops
