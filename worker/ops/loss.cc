#include "worker/ops/loss.h"

#include "worker/ops/common.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/record.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

enum class Reduction { kNone, kSum, kMean };

Reduction ParseReduction(const std::string& reduction, const char* op_name) {
  if (reduction == "none") return Reduction::kNone;
  if (reduction == "sum") return Reduction::kSum;
  TY_CHECK(reduction == "mean") << op_name << ": reduction \"" << reduction
                                << "\" is not supported; use \"none\", \"sum\" or \"mean\"";
  return Reduction::kMean;
}

// The targets for the kernels: each ignore_index or a class in [0, c) (device::CheckedIndices:
// on a device, without a host wait).
Tensor CheckedTargets(const Tensor& target, int64_t c, int64_t ignore_index) {
  return device::CheckedIndices(target,
                                device::IndexCheck{"cross_entropy", -1, c, true, ignore_index});
}

// How many targets are not ignore_index ("mean" divides by it), 0-dim of `dtype` on the
// targets' device, counted there.
Tensor TargetCount(const Tensor& target, int64_t ignore_index, DType dtype) {
  autograd::NoGradGuard no_grad;
  const Tensor ignore = Scalar(static_cast<double>(ignore_index), target.options());
  return Sum(ConvertTo(Ne(target, ignore), dtype));
}

// The per-row losses' gradient for the backward kernel: g itself for "none", else g (0-dim)
// spread over the rows, divided by the target count for "mean". On g's device, without reading
// g on the host (which would make the host wait for the device in the middle of backward).
Tensor RowGrads(const Tensor& g, int64_t rows, Reduction red, const Tensor& count) {
  if (red == Reduction::kNone) return ContiguousData(g);
  const Tensor v = red == Reduction::kMean ? Div(g, count) : g;
  return ContiguousData(views::Expand(views::Unsqueeze(v, 0), {rows}));
}

// Whether the kernels read the (R, C) logits where they lie: on CUDA, whose kernels take rows
// apart, when they are as a wide linear layer's padded output has them (ops::Linear, Note
// [Padded rows]: less than 16 bytes of padding). Rows further apart are copied, lest the
// gradient, laid out as the logits, take their gaps' memory too.
bool RowsInPlace(const Tensor& x) {
  const int64_t rows = x.size(0), c = x.size(1);
  const int64_t gap = x.stride(0) - c;
  return x.device().is_cuda() && (c <= 1 || x.stride(1) == 1) &&
         (rows <= 1 || (gap >= 0 && gap * static_cast<int64_t>(ElementSize(x.dtype())) < 16));
}

// An uninitialised (R, C) tensor whose rows lie as x's do.
Tensor EmptyRowsLike(const Tensor& x) {
  const int64_t rows = x.size(0), c = x.size(1);
  if (rows <= 1 || x.stride(0) == c) return Empty(x.shape(), x.options());
  return views::Narrow(Empty({rows, x.stride(0)}, x.options()), 1, 0, c);
}

// d loss / d logits: (R, C) from the saved logits, targets and row log-sum-exps.
Tensor CrossEntropyRowsBackward(const Node& n, const Tensor& g, const CrossEntropyOptions& o,
                                Reduction red, const Tensor& count) {
  const Tensor& x = n.saved(0);
  const Tensor& t = n.saved(1);
  const Tensor& lse = n.saved(2);
  const int64_t rows = x.size(0), c = x.size(1);
  Tensor gloss = RowGrads(g, rows, red, count);
  Tensor gx = EmptyRowsLike(x);
  device::CrossEntropyBackward(x, t, lse, ConvertTo(gloss, lse.dtype()), gx, rows, c,
                               o.ignore_index, o.label_smoothing);
  return gx;
}

// Fused log-softmax + nll over logits: (R, C) and target: (R) -> (R) losses for "none",
// else their sum or mean (0-dim).
Tensor CrossEntropyRows(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o,
                        Reduction red) {
  Tensor x = RowsInPlace(logits) ? logits : ContiguousData(logits);
  const int64_t rows = x.size(0), c = x.size(1);
  CheckSameDevice(x, target, "cross_entropy");
  Tensor t = CheckedTargets(target, c, o.ignore_index);
  const TensorOptions stats = x.options().set_dtype(device::StatsDType(x.device(), x.dtype()));
  Tensor loss = Empty({rows}, stats);
  Tensor lse = Empty({rows}, stats);
  device::CrossEntropyForward(x, t, loss, lse, rows, c, o.ignore_index, o.label_smoothing);
  Tensor out = loss;
  Tensor count;  // of the targets not ignored, for "mean"
  if (red != Reduction::kNone) {
    autograd::NoGradGuard no_grad;
    out = Sum(loss);
    if (red == Reduction::kMean) {
      count = TargetCount(t, o.ignore_index, stats.dtype);
      out = Div(out, count);
    }
  }
  if (ShouldRecord({&logits})) {
    auto node = Record("NllLossBackward0", {&logits}, [o, red, count](Node& n, GradList&& g) {
      return GradList{CrossEntropyRowsBackward(n, g[0], o, red, count)};
    });
    node->Save(x);
    node->Save(t);
    node->Save(lse);
    SetHistory(out, node);
  }
  return out;
}

// The target shape that goes with logits: logits' shape without the class dim.
Shape TargetShapeFor(const Tensor& logits) {
  Shape s;
  for (int64_t i = 0; i < logits.dim(); ++i)
    if (i != (logits.dim() == 1 ? 0 : 1)) s.push_back(logits.shape()[i]);
  return s;
}

// logits: (N, C, d1, ...) -> (N * d1 * ..., C), rows in target order; (C) -> (1, C).
Tensor LogitsAsRows(const Tensor& logits, int64_t c) {
  if (logits.dim() <= 2) return Reshape(logits, {-1, c});
  Shape order{0};
  for (int64_t i = 2; i < logits.dim(); ++i) order.push_back(i);
  order.push_back(1);
  return Reshape(Permute(logits, order), {-1, c});
}

}  // namespace

Tensor CrossEntropy(const Tensor& logits_in, const Tensor& target,
                    const CrossEntropyOptions& options) {
  // Autocast runs losses in f32. On a GPU the kernels already do: they read 16-bit logits, work
  // in f32 and write f32 losses, so the f32 copy of the logits (at a GPT's vocabulary the step's
  // largest tensor, and saved for the backward) is skipped; the gradient is rounded once, to
  // the logits' dtype, as the copy's backward would round it. Same results, bit for bit.
  const Tensor logits = logits_in.device().is_cuda() ? logits_in : AutocastF32(logits_in);
  CheckFloating(logits, "cross_entropy");
  const Reduction red = ParseReduction(options.reduction, "cross_entropy");
  TY_CHECK(target.defined() && target.dtype() == DType::kInt64)
      << "cross_entropy: target must hold int64 class indices, got "
      << (target.defined() ? DTypeName(target.dtype()) : "an undefined tensor");
  TY_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1)
      << "cross_entropy: label_smoothing " << options.label_smoothing << " must lie in [0, 1]";
  TY_CHECK(logits.dim() >= 1) << "cross_entropy: logits must be (C), (N, C) or (N, C, d1, ...)"
                              << ", got shape " << logits.shape();
  const int64_t c = logits.size(logits.dim() == 1 ? 0 : 1);
  TY_CHECK(c > 0) << "cross_entropy: logits shape " << logits.shape() << " has no classes";
  TY_CHECK(target.shape() == TargetShapeFor(logits))
      << "cross_entropy: target shape " << target.shape() << " does not match logits shape "
      << logits.shape() << "; expected " << TargetShapeFor(logits);
  Tensor loss = CrossEntropyRows(LogitsAsRows(logits, c), Reshape(target, {-1}), options, red);
  return red == Reduction::kNone ? Reshape(loss, target.shape()) : loss;
}

Tensor MseLoss(const Tensor& input_in, const Tensor& target_in, const std::string& reduction) {
  const Tensor input = AutocastF32(input_in);
  const Tensor target = AutocastF32(target_in);
  CheckSameFloating(input, target, "mse_loss");
  const Reduction red = ParseReduction(reduction, "mse_loss");
  const Shape shape = BroadcastShapes(input.shape(), target.shape(), "mse_loss");
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    Tensor diff = Sub(input, target);
    out = Mul(diff, diff);
    if (red == Reduction::kSum) out = Sum(out);
    if (red == Reduction::kMean) out = Mean(out);
  }
  if (ShouldRecord({&input, &target})) {
    // d/d input = 2 (input - target) * g, divided by the element count for "mean".
    const double scale = red == Reduction::kMean ? 2.0 / static_cast<double>(shape.numel()) : 2.0;
    auto node = Record("MseLossBackward0", {&input, &target},
                       [scale, si = input.shape(), st = target.shape()](Node& n, GradList&& g) {
                         Tensor d = Mul(MulScalar(Sub(n.saved(0), n.saved(1)), scale), g[0]);
                         GradList r(2);
                         if (NeedsGrad(n, 0)) r[0] = SumToShape(d, si);
                         if (NeedsGrad(n, 1)) r[1] = SumToShape(Neg(d), st);
                         return r;
                       });
    node->Save(input);
    node->Save(target);
    SetHistory(out, node);
  }
  return out;
}

}  // namespace trainyard::ops
