// Matrix products (float32/float64) on the GEMM kernel (kernels/cpu/gemm.h). Transposed and
// row-strided operands reach the kernel as they are (trans flag and leading dimension); other
// layouts are copied to contiguous first.
#pragma once

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

// torch.matmul. 1-D x 1-D is a dot product (0-dim result). A 1-D left operand is a row vector
// and a 1-D right operand a column vector; that dim is dropped from the result. Otherwise
// a: (*, m, k) x b: (*, k, n) -> (*, m, n) with the batch dims (*) broadcast.
Tensor Matmul(const Tensor& a, const Tensor& b);

// torch.nn.functional.linear: x: (*, in), weight: (out, in), bias: (out) or undefined
// -> (*, out) = x weight^T + bias, as one GEMM.
Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace trainyard::ops
