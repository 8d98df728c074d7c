#include "worker/tensor/factories.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/copy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/random.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard {

namespace kc = kernels::cpu;

Generator& DefaultGenerator() {
  static Generator gen(0);
  return gen;
}

void FillInPlace(const Tensor& t, double value) {
  Tensor c = t.is_contiguous() ? t : Empty(t.shape(), t.options());
  device::Fill(c, value);
  if (!t.is_contiguous()) CopyInto(t, c);
  t.BumpVersion();
}

Tensor Full(const Shape& shape, double value, TensorOptions options) {
  bool rg = options.requires_grad;
  Tensor t = Empty(shape, options.set_requires_grad(false));
  FillInPlace(t, value);
  if (rg) t.set_requires_grad(true);
  return t;
}
Tensor Zeros(const Shape& shape, TensorOptions options) { return Full(shape, 0, options); }
Tensor Ones(const Shape& shape, TensorOptions options) { return Full(shape, 1, options); }
Tensor ZerosLike(const Tensor& t) { return Zeros(t.shape(), t.options()); }
Tensor OnesLike(const Tensor& t) { return Ones(t.shape(), t.options()); }
Tensor FullLike(const Tensor& t, double value) { return Full(t.shape(), value, t.options()); }
Tensor Scalar(double value, TensorOptions options) { return Full(Shape{}, value, options); }

Tensor Arange(double start, double end, double step, TensorOptions options) {
  TY_CHECK(step != 0) << "arange: step must not be zero";
  double count = std::ceil((end - start) / step);
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  if (!options.device.is_cpu()) {
    Tensor host = Arange(start, end, step, TensorOptions(options).set_device(Device::Cpu()));
    return CopyToDevice(host, options.device).set_requires_grad(options.requires_grad);
  }
  Tensor t = Empty(Shape{n}, options.set_requires_grad(false));
  TY_DISPATCH_ALL(t.dtype(), "arange", [&] {
    scalar_t* p = static_cast<scalar_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = kc::Cast<scalar_t>(start + step * i);
  });
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
Tensor Arange(double end, TensorOptions options) { return Arange(0, end, 1, options); }

namespace {
// Where a random draw for `t` is written: t itself when contiguous in a dtype its device draws
// in, else a temporary in the compute type (f64 stays f64) that is copied into t.
Tensor DrawTarget(const Tensor& t) {
  if (t.is_contiguous() && device::ComputesIn(t.device(), t.dtype())) return t;
  DType compute = t.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  return Empty(t.shape(), t.options().set_dtype(compute));
}
}  // namespace

void UniformInPlace(const Tensor& t, double lo, double hi, Generator* gen) {
  if (gen == nullptr) gen = &DefaultGenerator();
  Tensor c = DrawTarget(t);
  uint64_t offset = gen->Reserve(kc::CountersFor(c.numel()));
  device::FillUniform(c, gen->seed(), offset, lo, hi);
  if (c.impl() != t.impl()) CopyInto(t, c);
  t.BumpVersion();
}

void NormalInPlace(const Tensor& t, double mean, double std, Generator* gen) {
  if (gen == nullptr) gen = &DefaultGenerator();
  Tensor c = DrawTarget(t);
  uint64_t offset = gen->Reserve(kc::CountersFor(c.numel()));
  device::FillNormal(c, gen->seed(), offset, mean, std);
  if (c.impl() != t.impl()) CopyInto(t, c);
  t.BumpVersion();
}

Tensor Uniform(const Shape& shape, double lo, double hi, TensorOptions options, Generator* gen) {
  TY_CHECK(IsFloating(options.dtype))
      << "uniform: dtype must be floating, got " << DTypeName(options.dtype);
  bool rg = options.requires_grad;
  Tensor t = Empty(shape, options.set_requires_grad(false));
  UniformInPlace(t, lo, hi, gen);
  if (rg) t.set_requires_grad(true);
  return t;
}

Tensor Normal(const Shape& shape, double mean, double std, TensorOptions options, Generator* gen) {
  TY_CHECK(IsFloating(options.dtype))
      << "normal: dtype must be floating, got " << DTypeName(options.dtype);
  bool rg = options.requires_grad;
  Tensor t = Empty(shape, options.set_requires_grad(false));
  NormalInPlace(t, mean, std, gen);
  if (rg) t.set_requires_grad(true);
  return t;
}

Tensor Rand(const Shape& shape, TensorOptions options, Generator* gen) {
  return Uniform(shape, 0, 1, options, gen);
}
Tensor Randn(const Shape& shape, TensorOptions options, Generator* gen) {
  return Normal(shape, 0, 1, options, gen);
}

Tensor RandInt(const Shape& shape, int64_t lo, int64_t hi, TensorOptions options, Generator* gen) {
  TY_CHECK(hi > lo) << "randint: high " << hi << " must be above low " << lo;
  if (!options.device.is_cpu()) {
    Tensor host = RandInt(shape, lo, hi, TensorOptions(options).set_device(Device::Cpu()), gen);
    return CopyToDevice(host, options.device);
  }
  Tensor u = Uniform(shape, 0, 1, Options(DType::kFloat64), gen);
  Tensor t = Empty(shape, options);
  const double* up = u.data<double>();
  TY_DISPATCH_ALL(t.dtype(), "randint", [&] {
    scalar_t* p = static_cast<scalar_t*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t v = lo + static_cast<int64_t>(up[i] * static_cast<double>(hi - lo));
      p[i] = kc::Cast<scalar_t>(v < hi ? v : hi - 1);
    }
  });
  return t;
}

template <typename T>
Tensor FromVector(const std::vector<T>& values, const Shape& shape, bool requires_grad) {
  TY_CHECK(static_cast<int64_t>(values.size()) == shape.numel())
      << "FromVector: " << values.size() << " values for shape " << shape;
  Tensor t = Empty(shape, Options(DTypeOf<T>::value));
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  if (requires_grad) t.set_requires_grad(true);
  return t;
}
template Tensor FromVector<float>(const std::vector<float>&, const Shape&, bool);
template Tensor FromVector<double>(const std::vector<double>&, const Shape&, bool);
template Tensor FromVector<int64_t>(const std::vector<int64_t>&, const Shape&, bool);
template Tensor FromVector<int32_t>(const std::vector<int32_t>&, const Shape&, bool);
template Tensor FromVector<uint8_t>(const std::vector<uint8_t>&, const Shape&, bool);

}  // namespace trainyard
