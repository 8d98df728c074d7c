// Tensor factories. Random ones draw from a Generator (the default one unless given), with
// results that depend only on the generator state, never on the thread count.
#pragma once

#include <vector>

#include "worker/tensor/generator.h"
#include "worker/tensor/tensor.h"

namespace trainyard {

Tensor Zeros(const Shape& shape, TensorOptions options = {});
Tensor Ones(const Shape& shape, TensorOptions options = {});
Tensor Full(const Shape& shape, double value, TensorOptions options = {});
Tensor ZerosLike(const Tensor& t);
Tensor OnesLike(const Tensor& t);
Tensor FullLike(const Tensor& t, double value);
// A 0-dim tensor holding `value`.
Tensor Scalar(double value, TensorOptions options = {});
// [start, end) in steps of `step` (default int64 like PyTorch's arange of integers).
Tensor Arange(double start, double end, double step = 1,
              TensorOptions options = Options(DType::kInt64));
Tensor Arange(double end, TensorOptions options = Options(DType::kInt64));

// Uniform in [0, 1), standard normal, uniform in [lo, hi), normal(mean, std). Floating dtypes.
Tensor Rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor Randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor Uniform(const Shape& shape, double lo, double hi, TensorOptions options = {},
               Generator* gen = nullptr);
Tensor Normal(const Shape& shape, double mean, double std, TensorOptions options = {},
              Generator* gen = nullptr);
// Uniform integers in [lo, hi).
Tensor RandInt(const Shape& shape, int64_t lo, int64_t hi,
               TensorOptions options = Options(DType::kInt64), Generator* gen = nullptr);

// In-place fills (no autograd; bump the version).
void FillInPlace(const Tensor& t, double value);
void UniformInPlace(const Tensor& t, double lo, double hi, Generator* gen = nullptr);
void NormalInPlace(const Tensor& t, double mean, double std, Generator* gen = nullptr);

// A tensor holding a copy of `values` with the given shape (numel must match).
template <typename T>
Tensor FromVector(const std::vector<T>& values, const Shape& shape, bool requires_grad = false);
template <typename T>
Tensor FromVector(const std::vector<T>& values) {
  return FromVector(values, Shape{static_cast<int64_t>(values.size())});
}

}  // namespace trainyard
