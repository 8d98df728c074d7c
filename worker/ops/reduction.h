// Reductions over dims (float32/float64), with keepdim as in PyTorch. An empty dims list
// reduces over every dim.
#pragma once

#include <utility>
#include <vector>

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

Tensor Sum(const Tensor& x);
Tensor Sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor Mean(const Tensor& x);
Tensor Mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), like torch.var.
Tensor Var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1,
           bool keepdim = false);
// Largest / smallest value; the gradient is shared evenly among ties (as in PyTorch).
Tensor Max(const Tensor& x);
Tensor Min(const Tensor& x);
// Along one dim: (values, indices). The gradient flows to the returned index.
std::pair<Tensor, Tensor> Max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> Min(const Tensor& x, int64_t dim, bool keepdim = false);
// Index of the largest value along dim (int64, no gradient); without dim, of the flattened x.
Tensor Argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor Argmax(const Tensor& x);

}  // namespace trainyard::ops
