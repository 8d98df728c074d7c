#include "worker/ops/softmax.h"

#include "worker/ops/common.h"
#include "worker/ops/record.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/views.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

// A 0-dim tensor is handled as shape [1] (its softmax is 1, its log-softmax 0).
Tensor AtLeast1d(const Tensor& t) { return t.dim() == 0 ? views::View(t, Shape{1}) : t; }

// t: (..., n, ...) with n at dim d -> contiguous (..., n): the kernels' (rows, n) layout.
Tensor DimLast(const Tensor& t, int64_t d) {
  return ContiguousData(d == t.dim() - 1 ? t : views::Transpose(t, d, -1));
}

// Undoes DimLast's move on a (..., n) result (a view), back to `ndim` dims (0 for a scalar).
Tensor DimBack(const Tensor& t, int64_t d, int64_t ndim) {
  if (ndim == 0) return views::View(t, Shape{});
  return d == t.dim() - 1 ? t : views::Transpose(t, d, -1);
}

// (rows, n) of a contiguous (..., n) tensor.
void RowsOf(const Tensor& t, int64_t* rows, int64_t* n) {
  *n = t.size(-1);
  *rows = *n == 0 ? 0 : t.numel() / *n;
}

Tensor SoftmaxBackward(const Tensor& y, const Tensor& gy, int64_t d, bool log) {
  const int64_t ndim = y.dim();
  Tensor yt = DimLast(AtLeast1d(y), d);
  Tensor gt = DimLast(AtLeast1d(gy), d);
  Tensor gx = Empty(yt.shape(), yt.options());
  int64_t rows, n;
  RowsOf(yt, &rows, &n);
  device::SoftmaxBackward(yt, gt, gx, rows, n, log);
  return DimBack(gx, d, ndim);
}

Tensor SoftmaxImpl(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = AutocastF32(x_in);
  const char* name = log ? "log_softmax" : "softmax";
  CheckFloating(x, name);
  const int64_t d = WrapDim(dim, x.dim(), name);
  Tensor xt = DimLast(AtLeast1d(x), d);  // (rows, n)
  Tensor yt = Empty(xt.shape(), xt.options());
  int64_t rows, n;
  RowsOf(xt, &rows, &n);
  device::SoftmaxForward(xt, yt, rows, n, log);
  Tensor out = DimBack(yt, d, x.dim());
  if (ShouldRecord({&x})) {
    auto node = Record(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", {&x},
                       [d, log](Node& n, GradList&& g) {
                         return GradList{SoftmaxBackward(n.saved(0), g[0], d, log)};
                       });
    node->Save(out, /*is_output=*/true);
    SetHistory(out, node);
  }
  return out;
}

}  // namespace

Tensor Softmax(const Tensor& x, int64_t dim) { return SoftmaxImpl(x, dim, false); }
Tensor LogSoftmax(const Tensor& x, int64_t dim) { return SoftmaxImpl(x, dim, true); }

}  // namespace trainyard::ops
