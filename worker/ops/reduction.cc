#include "worker/ops/reduction.h"

#include <algorithm>

#include "kernels/cpu/reduce.h"
#include "worker/ops/common.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/record.h"
#include "worker/ops/views.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

// A reduction problem in the kernels' [outer, k, inner] form.
struct Plan {
  Tensor input;  // contiguous
  int64_t outer = 1, k = 1, inner = 1;
  Shape out_shape;  // with keepdim
  Shape out_squeezed;
  std::vector<bool> reduced;
};

Plan MakePlan(const Tensor& x, const std::vector<int64_t>& dims_in, const char* name) {
  Plan p;
  const int64_t nd = x.dim();
  p.reduced.assign(nd, dims_in.empty());
  for (int64_t d : dims_in) {
    int64_t w = WrapDim(d, nd, name);
    if (nd == 0) continue;
    TY_CHECK(!p.reduced[w] || dims_in.empty()) << name << ": dim " << d << " appears twice";
    p.reduced[w] = true;
  }
  for (int64_t i = 0; i < nd; ++i) {
    p.out_shape.push_back(p.reduced[i] ? 1 : x.shape()[i]);
    if (!p.reduced[i]) p.out_squeezed.push_back(x.shape()[i]);
  }
  // One run of reduced dims: [outer, k, inner] on the contiguous input directly.
  int64_t first = -1, last = -1;
  for (int64_t i = 0; i < nd; ++i)
    if (p.reduced[i]) {
      if (first < 0) first = i;
      last = i;
    }
  bool one_run = true;
  for (int64_t i = first; i >= 0 && i <= last; ++i) one_run = one_run && p.reduced[i];
  if (first < 0) {  // scalar input
    p.input = ContiguousData(x);
    return p;
  }
  if (one_run) {
    p.input = ContiguousData(x);
    for (int64_t i = 0; i < first; ++i) p.outer *= x.shape()[i];
    for (int64_t i = first; i <= last; ++i) p.k *= x.shape()[i];
    for (int64_t i = last + 1; i < nd; ++i) p.inner *= x.shape()[i];
    return p;
  }
  // Otherwise move kept dims first and reduced dims last, then reduce rows.
  Shape order;
  for (int64_t i = 0; i < nd; ++i)
    if (!p.reduced[i]) order.push_back(i), p.outer *= x.shape()[i];
  for (int64_t i = 0; i < nd; ++i)
    if (p.reduced[i]) order.push_back(i), p.k *= x.shape()[i];
  p.input = ContiguousData(views::Permute(x, order));
  return p;
}

Tensor SumImpl(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim, bool mean) {
  const Tensor x = AutocastF32(x_in);
  const char* name = mean ? "mean" : "sum";
  CheckFloating(x, name);
  Plan p = MakePlan(x, dims, name);
  Tensor out = Empty(keepdim ? p.out_shape : p.out_squeezed, x.options());
  double scale = 1;
  if (mean) {
    // The CPU kernel takes the scale in the input's dtype, so round 1/k as it is there.
    scale = x.dtype() == DType::kFloat32 ? static_cast<double>(1.0f / static_cast<float>(p.k))
                                         : 1.0 / static_cast<double>(p.k);
  }
  device::ReduceSum(p.input, out, p.outer, p.k, p.inner, scale);
  if (ShouldRecord({&x})) {
    const char* node_name = dims.empty() ? (mean ? "MeanBackward0" : "SumBackward0")
                                         : (mean ? "MeanBackward1" : "SumBackward1");
    auto node =
        Record(node_name, {&x},
               [in_shape = x.shape(), kept = p.out_shape, k = p.k, mean](Node&, GradList&& g) {
                 Tensor gk = Reshape(g[0], kept);
                 if (mean) gk = MulScalar(gk, 1.0 / static_cast<double>(k));
                 return GradList{Expand(gk, in_shape)};
               });
    SetHistory(out, node);
  }
  return out;
}

}  // namespace

Tensor Sum(const Tensor& x) { return SumImpl(x, {}, false, false); }
Tensor Sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return SumImpl(x, dims, keepdim, false);
}
Tensor Mean(const Tensor& x) { return SumImpl(x, {}, false, true); }
Tensor Mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return SumImpl(x, dims, keepdim, true);
}

Tensor Var(const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  const Tensor x = AutocastF32(x_in);
  CheckFloating(x, "var");
  if (x.device().is_cuda()) {
    // CUDA has no fused variance kernel: sum((x - mean)^2) / (k - correction), differentiable.
    Plan p = MakePlan(x, dims, "var");
    Tensor d = Sub(x, Mean(x, dims, /*keepdim=*/true));
    Tensor ss = Sum(Mul(d, d), dims, keepdim);
    return MulScalar(ss, 1.0 / static_cast<double>(std::max<int64_t>(p.k - correction, 0)));
  }
  Plan p = MakePlan(x, dims, "var");
  Tensor out = Empty(keepdim ? p.out_shape : p.out_squeezed, x.options());
  TY_DISPATCH_FLOATING(x.dtype(), "var", [&] {
    kc::ReduceVar<scalar_t>(p.input.data<scalar_t>(), out.data<scalar_t>(), nullptr, p.outer, p.k,
                            p.inner, correction);
  });
  if (ShouldRecord({&x})) {
    auto node = Record("VarBackward0", {&x},
                       [kept = p.out_shape, dims, k = p.k, correction](Node& n, GradList&& g) {
                         // d var / dx = 2 (x - mean) / (k - correction)
                         const Tensor& xs = n.saved(0);
                         Tensor mean = Mean(xs, dims, /*keepdim=*/true);
                         double scale =
                             2.0 / static_cast<double>(std::max<int64_t>(k - correction, 0));
                         Tensor gk = Reshape(g[0], kept);
                         return GradList{Mul(MulScalar(Sub(xs, mean), scale), gk)};
                       });
    node->Save(x);
    SetHistory(out, node);
  }
  return out;
}

namespace {

std::pair<Tensor, Tensor> MaxMinDim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  CheckFloating(x, name);
  int64_t d = WrapDim(dim, x.dim(), name);
  TY_CHECK(x.dim() == 0 || x.shape()[d] > 0)
      << name << ": cannot reduce over dim " << d << " of size 0";
  Plan p = MakePlan(x, {d}, name);
  Shape shape = keepdim ? p.out_shape : p.out_squeezed;
  Tensor values = Empty(shape, x.options());
  Tensor indices = Empty(shape, Options(DType::kInt64).set_device(x.device()));
  device::ReduceMaxMin(is_max, p.input, values, indices, p.outer, p.k, p.inner);
  if (ShouldRecord({&x})) {
    auto node = Record(is_max ? "MaxBackward0" : "MinBackward0", {&x},
                       [in_shape = x.shape(), kept = p.out_shape, d](Node& n, GradList&& g) {
                         Tensor idx = Reshape(n.saved(0), kept);
                         Tensor gk = Reshape(g[0], kept);
                         Tensor gx = Zeros(in_shape, gk.options());
                         return GradList{ScatterAdd(gx, d, idx, gk)};
                       });
    node->Save(indices);
    SetHistory(values, node);
  }
  return {values, indices};
}

Tensor MaxMinAll(const Tensor& x, bool is_max) {
  const char* name = is_max ? "max" : "min";
  CheckFloating(x, name);
  TY_CHECK(x.numel() > 0) << name << ": cannot reduce an empty tensor";
  Tensor flat = ContiguousData(x);
  Tensor out = Empty(Shape{}, x.options());
  device::ReduceMaxMin(is_max, flat, out, Tensor(), 1, flat.numel(), 1);
  if (ShouldRecord({&x})) {
    auto node = Record(is_max ? "MaxBackward1" : "MinBackward1", {&x}, [](Node& n, GradList&& g) {
      const Tensor& xs = n.saved(0);
      const Tensor& best = n.saved(1);
      // The extreme's positions; when it is NaN, the NaN positions (as in PyTorch).
      Tensor eq = To(Eq(xs, best), xs.dtype());
      Tensor nans = Mul(To(Ne(xs, xs), xs.dtype()), To(Ne(best, best), xs.dtype()));
      Tensor mask = Maximum(eq, nans);
      Tensor count = Sum(mask);
      return GradList{Mul(mask, Div(g[0], count))};
    });
    node->Save(x);
    node->Save(out, /*is_output=*/true);
    SetHistory(out, node);
  }
  return out;
}

}  // namespace

Tensor Max(const Tensor& x) { return MaxMinAll(x, true); }
Tensor Min(const Tensor& x) { return MaxMinAll(x, false); }
std::pair<Tensor, Tensor> Max(const Tensor& x, int64_t dim, bool keepdim) {
  return MaxMinDim(x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> Min(const Tensor& x, int64_t dim, bool keepdim) {
  return MaxMinDim(x, dim, keepdim, false);
}

Tensor Argmax(const Tensor& x, int64_t dim, bool keepdim) {
  autograd::NoGradGuard no_grad;
  return MaxMinDim(x, dim, keepdim, true).second;
}

Tensor Argmax(const Tensor& x) { return Argmax(Reshape(x, Shape{-1}), 0, false); }

}  // namespace trainyard::ops
