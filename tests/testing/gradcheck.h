// Finite-difference gradient checks for tests, in float64.
//
// GradCheck(f, inputs) draws a random cotangent v for y = f(inputs), computes the analytic
// vector-Jacobian product with autograd::Grad, and compares it with central differences of
// sum(f(inputs) * v) for every element of every input that requires grad. Inputs may be
// non-contiguous views (the perturbation writes through them).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/reduction.h"
#include "worker/tensor/factories.h"

namespace trainyard::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradCheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-4;
  uint64_t seed = 1234;
};

// Returns an empty string on success, else a description of the first mismatch.
inline std::string GradCheckMessage(const Fn& f, const std::vector<Tensor>& inputs,
                                    GradCheckOptions opt = {}) {
  Tensor y = f(inputs);
  Generator gen(opt.seed);
  Tensor v = Randn(y.shape(), Options(y.dtype()), &gen);
  std::vector<Tensor> wrt;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) wrt.push_back(t);
  auto analytic = autograd::Grad({y}, wrt, {v}, autograd::GradOptions{false, true});
  if (!analytic.ok()) return "autograd::Grad failed: " + analytic.status().ToString();

  auto objective = [&]() {
    autograd::NoGradGuard no_grad;
    return ops::Sum(ops::Mul(f(inputs), v)).item();
  };
  for (size_t k = 0; k < wrt.size(); ++k) {
    Tensor x = wrt[k];
    Tensor a = (*analytic)[k];
    std::vector<double> av =
        a.defined() ? ToVector<double>(a) : std::vector<double>(x.numel(), 0.0);
    if (a.defined() && a.shape() != x.shape())
      return "input " + std::to_string(k) + ": gradient shape " + a.shape().ToString() +
             " != input shape " + x.shape().ToString();
    // Perturb element i through a flat index over x's logical layout.
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t off = x.offset(), rem = i;
      for (int64_t d = x.dim() - 1; d >= 0; --d) {
        off += (rem % x.shape()[d]) * x.strides()[d];
        rem /= x.shape()[d];
      }
      double* p = static_cast<double*>(x.storage()->data()) + off;
      const double orig = *p;
      *p = orig + opt.eps;
      double fp = objective();
      *p = orig - opt.eps;
      double fm = objective();
      *p = orig;
      double numeric = (fp - fm) / (2 * opt.eps);
      double diff = std::abs(numeric - av[i]);
      if (diff > opt.atol + opt.rtol * std::abs(numeric)) {
        return "input " + std::to_string(k) + " element " + std::to_string(i) + ": analytic " +
               std::to_string(av[i]) + " vs numeric " + std::to_string(numeric);
      }
    }
  }
  return "";
}

// A float64 leaf that requires grad, drawn from `gen`: uniform in [lo, hi).
inline Tensor RandLeaf(const Shape& shape, Generator* gen, double lo = -1, double hi = 1) {
  Tensor t = Uniform(shape, lo, hi, Options(DType::kFloat64), gen);
  t.set_requires_grad(true);
  return t;
}

}  // namespace trainyard::testing

#define EXPECT_GRADCHECK(f, inputs, ...) \
  EXPECT_EQ(::trainyard::testing::GradCheckMessage(f, inputs, ##__VA_ARGS__), "")
