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

// TY_CHECKs that a and b have the same dtype and a floating one.
void CheckSameFloating(const Tensor& a, const Tensor& b, const char* op_name);
void CheckFloating(const Tensor& a, const char* op_name);

}  // namespace trainyard::ops
