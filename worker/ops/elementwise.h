// Differentiable elementwise ops with NumPy broadcasting (float32/float64), comparisons
// (any dtype, no gradient) and in-place updates (never recorded; they bump the version).
#pragma once

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

Tensor Add(const Tensor& a, const Tensor& b, double alpha = 1);  // a + alpha * b
Tensor Sub(const Tensor& a, const Tensor& b, double alpha = 1);  // a - alpha * b
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor Maximum(const Tensor& a, const Tensor& b);
Tensor Minimum(const Tensor& a, const Tensor& b);
Tensor Pow(const Tensor& a, const Tensor& b);
Tensor AddScalar(const Tensor& a, double s);
Tensor MulScalar(const Tensor& a, double s);
Tensor Pow(const Tensor& a, double exponent);

Tensor Neg(const Tensor& x);
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Rsqrt(const Tensor& x);
Tensor Abs(const Tensor& x);
// Clamp to [lo, hi]; pass -inf or +inf to leave a side open.
Tensor Clamp(const Tensor& x, double lo, double hi);
// cond (bool/uint8) ? a : b, all broadcast together.
Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Comparisons: bool tensors, broadcasting; a and b of the same dtype.
Tensor Eq(const Tensor& a, const Tensor& b);
Tensor Ne(const Tensor& a, const Tensor& b);
Tensor Lt(const Tensor& a, const Tensor& b);
Tensor Le(const Tensor& a, const Tensor& b);
Tensor Gt(const Tensor& a, const Tensor& b);
Tensor Ge(const Tensor& a, const Tensor& b);
Tensor GtScalar(const Tensor& a, double s);

// In place: self (op)= other. Not recorded: a tensor that requires grad cannot be updated in
// place while grad mode is on (use them under NoGradGuard, as optimizers do).
void AddInPlace(const Tensor& self, const Tensor& other, double alpha = 1);
void MulInPlace(const Tensor& self, const Tensor& other);
void MulScalarInPlace(const Tensor& self, double s);
void AddScalarInPlace(const Tensor& self, double s);
void ZeroInPlace(const Tensor& self);
void CopyInPlace(const Tensor& self, const Tensor& src);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return Add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return Sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return Mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return Div(a, b); }
inline Tensor operator-(const Tensor& a) { return Neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return AddScalar(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return AddScalar(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return MulScalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return MulScalar(a, 1.0 / s); }
inline Tensor operator*(double s, const Tensor& a) { return MulScalar(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return AddScalar(a, s); }

// Shared by activation.cc: a unary kernel op forward with its backward recorded.
namespace internal {
Tensor UnaryOp(int op, const Tensor& x, double alpha, double beta, const char* node_name,
               bool save_output);
}

}  // namespace trainyard::ops
