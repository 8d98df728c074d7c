// Elementwise kernels over strided operands (see iter.h). Each op has a plain scalar
// definition in elementwise.cc that is the reference; inner runs with unit or zero strides are
// vectorised (TY_SIMD), others take a scalar strided loop with the same arithmetic.
// T is float or double.
#pragma once

#include <cstdint>

#include "kernels/cpu/iter.h"

namespace trainyard::kernels::cpu {

// y = f(x; alpha, beta). Parameters: kPow y = x^alpha; kClamp y = min(max(x, alpha), beta)
// (pass -inf/+inf for a missing side); kAffine y = alpha * x + beta; kLeaky unused here.
enum class UnaryOp {
  kCopy,
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kAbs,
  kSign,
  kRelu,
  kSigmoid,
  kTanh,
  kSilu,
  kGeluTanh,
  kGeluErf,
  kPow,
  kClamp,
  kAffine,
};

// z = f(x, y). kAdd computes x + alpha * y; kSub x - alpha * y; the others ignore alpha.
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow };

// z = (x op y) as 0/1 bytes.
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };

// it: operand 0 = out, 1 = x.
template <typename T>
void Unary(UnaryOp op, const StridedIter& it, T* out, const T* x, T alpha, T beta);

// Contiguous backward: gx[i] = g[i] * f'(x[i]) for the same op and parameters. `y` is the
// forward output (some derivatives read it: exp, sqrt, rsqrt, sigmoid, tanh).
template <typename T>
void UnaryBackward(UnaryOp op, int64_t n, const T* x, const T* y, const T* g, T* gx, T alpha,
                   T beta);

// it: operand 0 = out, 1 = x, 2 = y.
template <typename T>
void Binary(BinaryOp op, const StridedIter& it, T* out, const T* x, const T* y, T alpha);

// it: operand 0 = out (uint8), 1 = x, 2 = y.
template <typename T>
void Compare(CompareOp op, const StridedIter& it, uint8_t* out, const T* x, const T* y);

// it: operand 0 = out, 1 = cond (uint8), 2 = x, 3 = y; out = cond ? x : y.
template <typename T>
void Where(const StridedIter& it, T* out, const uint8_t* cond, const T* x, const T* y);

// out[i] = value for every element (contiguous).
template <typename T>
void Fill(int64_t n, T* out, T value);

}  // namespace trainyard::kernels::cpu
