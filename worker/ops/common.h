// Helpers shared by the op families: broadcasting, strided iterators over tensors, and the
// reduction of a broadcast gradient back to an input's shape.
#pragma once

#include "kernels/cpu/iter.h"
#include "worker/tensor/tensor.h"

namespace trainyard::ops {

// Strides of `t` seen with shape `shape` (t broadcast to it): 0 where t is broadcast.
Shape BroadcastStrides(const Tensor& t, const Shape& shape);

// Iterator over `shape` for the given operands (each broadcast to shape).
kernels::cpu::StridedIter IterFor(const Shape& shape, std::initializer_list<const Tensor*> ops);

// Sums `grad` over the dims along which `shape` was broadcast to grad's shape.
Tensor SumToShape(const Tensor& grad, const Shape& shape);

// Type promotion between floating dtypes, as in PyTorch: the wider type, f32 for bf16 with
// f16. Non-floating pairs are left alone (the op checks them).
DType PromoteTypes(DType a, DType b);
// x converted (differentiably) to PromoteTypes(x, other); x itself when nothing changes. Binary
// ops call it on both operands, so a bf16 matmul output can meet an f32 bias under autocast.
Tensor PromoteTo(const Tensor& x, const Tensor& other);

// Note [Autocast policy] (worker/autograd/autocast.h), applied at the top of each op:
// AutocastLow for the products (matmul, linear, conv, attention): x in the autocast dtype on
// CUDA, rounded to it and back to float32 on the CPU. AutocastF32 for the ops that compute in
// float32 (softmax, losses, norms, reductions, exp, log, pow): bf16/f16 inputs cast up. Both
// return x itself when autocast is off or x is float64 or not floating; the casts are recorded.
Tensor AutocastLow(const Tensor& x);
Tensor AutocastF32(const Tensor& x);

// TY_CHECKs that a and b are on one device.
void CheckSameDevice(const Tensor& a, const Tensor& b, const char* op_name);
// TY_CHECKs that a and b have the same dtype, one ops compute in on their device
// (device::ComputesIn), and the same device.
void CheckSameFloating(const Tensor& a, const Tensor& b, const char* op_name);
void CheckFloating(const Tensor& a, const char* op_name);

}  // namespace trainyard::ops
