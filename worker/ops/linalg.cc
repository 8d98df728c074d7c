#include "worker/ops/linalg.h"

#include <algorithm>
#include <optional>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "worker/ops/common.h"
#include "worker/ops/record.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

// Whether a batch of products is spread over threads one product per task (Gemm may be called
// concurrently) rather than run one by one, each split over threads inside Gemm: when Gemm
// would not cut them (kernels/cpu/gemm.h).
bool SpreadBatch(int64_t count, int64_t m, int64_t n, int64_t k) {
  return count > 1 && kc::GemmBlocks(m, n, k) == 1;
}

// How a rows x cols matrix with strides (sr, sc) is handed to Gemm: stored row-major
// (trans = false) with row stride ld, or column-major (trans = true) with column stride ld.
struct MatLayout {
  bool trans = false;
  int64_t ld = 0;
};

std::optional<MatLayout> LayoutOf(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  // The stride of a size-1 dim is never followed; ld only has to cover one stored row.
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= c1)) {
    return MatLayout{false, rows == 1 ? c1 : sr};
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= r1)) {
    return MatLayout{true, cols == 1 ? r1 : sc};
  }
  return std::nullopt;
}

// One operand of a batched product: x: (*, rows, cols), or its contiguous copy, with its
// Gemm layout and its strides over the output's batch dims (0 where broadcast).
struct Operand {
  Tensor data;
  MatLayout layout;
  Shape batch_strides;
};

Operand MakeOperand(const Tensor& x, const Shape& batch) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Operand op{x, {}, {}};
  auto layout = LayoutOf(rows, cols, x.stride(-2), x.stride(-1));
  if (!layout) {
    op.data = ContiguousData(x);
    layout = LayoutOf(rows, cols, op.data.stride(-2), op.data.stride(-1));
    TY_CHECK(layout.has_value()) << "matmul: no GEMM layout for a contiguous " << x.shape();
  }
  op.layout = *layout;
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  Shape strides = BroadcastStrides(op.data, full);
  op.batch_strides = Shape(strides.data(), batch.size());
  return op;
}

// out[i] = a[i] @ b[i] (+ out[i] when accumulate) for every batch index i; out contiguous.
template <typename T>
void BatchedGemm(const Operand& a, const Operand& b, const Shape& batch, int64_t m, int64_t n,
                 int64_t k, bool accumulate, T* out) {
  const T* pa = a.data.data<T>();
  const T* pb = b.data.data<T>();
  const T beta = accumulate ? T(1) : T(0);
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      int64_t oa = 0, ob = 0, rem = i;
      for (int64_t d = batch.size() - 1; d >= 0; --d) {
        const int64_t idx = rem % batch[d];
        rem /= batch[d];
        oa += idx * a.batch_strides[d];
        ob += idx * b.batch_strides[d];
      }
      kc::Gemm<T>(a.layout.trans, b.layout.trans, m, n, k, T(1), pa + oa, a.layout.ld, pb + ob,
                  b.layout.ld, beta, out + i * m * n, n);
    }
  };
  const int64_t count = batch.numel();
  if (SpreadBatch(count, m, n, k)) {
    kc::ParallelFor(count, kc::GrainFor(m * n * k), run);
  } else {
    run(0, count);
  }
}

// The one stride over all of `batch` with which strides walk it in row-major order, if any
// (0 for a broadcast operand, the product stride for a folded batch).
std::optional<int64_t> UniformBatchStride(const Shape& batch, const Shape& strides) {
  if (batch.size() == 0) return 0;
  for (int64_t d = 0; d + 1 < batch.size(); ++d) {
    if (batch[d] == 1) continue;
    if (strides[d] != strides[d + 1] * batch[d + 1]) return std::nullopt;
  }
  return strides[batch.size() - 1];
}

// The CUDA form of BatchedGemm: one cuBLASLt call over the whole batch when both operands walk
// it with one stride each, else one call per batch index. `bias` (n entries) is added by the
// epilogue when defined (then out is overwritten, not accumulated).
void CudaBatchedGemm(const Operand& a, const Operand& b, const Shape& batch, int64_t m, int64_t n,
                     int64_t k, bool accumulate, const Tensor& out, const Tensor& bias) {
  cuda::GemmArgs g;
  g.in = ToScalarType(a.data.dtype());
  g.out = ToScalarType(out.dtype());
  g.trans_a = a.layout.trans;
  g.trans_b = b.layout.trans;
  g.m = m, g.n = n, g.k = k;
  g.beta = accumulate ? 1.0f : 0.0f;
  // out's rows may lie apart (a padded linear output, Note [Padded rows]) for one product.
  const int64_t ldc = out.dim() >= 2 && m > 1 ? out.stride(-2) : n;
  TY_CHECK((n <= 1 || out.stride(-1) == 1) && ldc >= n && (ldc == n || batch.numel() == 1))
      << "matmul: the output " << out.shape() << " with strides " << out.strides()
      << " is not one the GEMM writes";
  g.lda = a.layout.ld, g.ldb = b.layout.ld, g.ldc = ldc;
  g.epilogue.bias = bias.defined() ? bias.raw_data() : nullptr;
  const size_t esize = ElementSize(a.data.dtype());
  const auto* pa = static_cast<const char*>(a.data.raw_data());
  const auto* pb = static_cast<const char*>(b.data.raw_data());
  auto* pc = static_cast<char*>(out.raw_data());
  cuda::Stream stream = ComputeStream(out.device());
  const auto sa = UniformBatchStride(batch, a.batch_strides);
  const auto sb = UniformBatchStride(batch, b.batch_strides);
  const int64_t count = batch.numel();
  if (sa && sb && (count == 1 || !bias.defined())) {
    g.a = pa, g.b = pb, g.c = pc;
    g.stride_a = *sa, g.stride_b = *sb, g.stride_c = m * n;
    g.batch = count;
    CudaBackend().Gemm(g, stream);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    int64_t oa = 0, ob = 0, rem = i;
    for (int64_t d = batch.size() - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * a.batch_strides[d];
      ob += idx * b.batch_strides[d];
    }
    g.a = pa + oa * esize, g.b = pb + ob * esize;
    g.c = pc + i * m * n * ElementSize(out.dtype());
    CudaBackend().Gemm(g, stream);
  }
}

Shape BatchShape(const Tensor& t) { return Shape(t.shape().data(), t.dim() - 2); }
// Product of all dims but the last: the row count of t flattened to 2-D.
int64_t Rows(const Tensor& t) { return Shape(t.shape().data(), t.dim() - 1).numel(); }

// x viewed as `shape` without autograd: a view when the strides allow, else a copy.
Tensor RawReshape(const Tensor& x, const Shape& shape) {
  if (auto strides = views::ViewStrides(x.shape(), x.strides(), shape)) {
    return MakeView(x, shape, *strides, x.offset());
  }
  Tensor c = ContiguousData(x);
  return MakeView(c, shape, ContiguousStrides(shape), c.offset());
}

Tensor RawTranspose(const Tensor& t) { return views::Transpose(t, -1, -2); }

// out: contiguous (*batch, m, n) = a: (*, m, k) @ b: (*, k, n) (+ out when accumulate, + bias
// (n) when defined; bias only on CUDA, where the GEMM's epilogue adds it). Both operands are at
// least 2-D; batch is their broadcast batch shape. On CUDA a single product's out may have its
// rows apart (Note [Padded rows]). No autograd.
void MatmulInto(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate,
                const Tensor& bias = Tensor()) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) {  // the products are 0
    if (bias.defined()) {
      CopyInto(out, bias);
    } else if (!accumulate) {
      FillInPlace(out, 0);
    }
    return;
  }
  Shape batch = BroadcastShapes(BatchShape(a), BatchShape(b), "matmul");
  Operand oa = MakeOperand(a, batch), ob = MakeOperand(b, batch);
  if (out.device().is_cuda()) {
    CudaBatchedGemm(oa, ob, batch, m, n, k, accumulate, out, bias);
    return;
  }
  TY_CHECK(!bias.defined()) << "matmul: a fused bias is for CUDA only";
  TY_DISPATCH_FLOATING(a.dtype(), "matmul", [&] {
    BatchedGemm<scalar_t>(oa, ob, batch, m, n, k, accumulate, out.data<scalar_t>());
  });
}

// a: (*, m, k) @ b: (*, k, n) -> contiguous (*batch, m, n); no autograd. When b has no batch
// dims and a's fold into its rows without a copy, this is a single GEMM.
Tensor RawMatmul(const Tensor& a, const Tensor& b) {
  Shape shape = BroadcastShapes(BatchShape(a), BatchShape(b), "matmul");
  shape.push_back(a.size(-2));
  shape.push_back(b.size(-1));
  Tensor out = Empty(shape, a.options());
  const int64_t k = a.size(-1);
  if (b.dim() == 2 && a.dim() > 2) {
    Shape flat{Rows(a), k};
    if (auto strides = views::ViewStrides(a.shape(), a.strides(), flat)) {
      Tensor a2 = MakeView(a, flat, *strides, a.offset());
      MatmulInto(a2, b, RawReshape(out, {flat[0], b.size(-1)}), false);
      return out;
    }
  }
  MatmulInto(a, b, out, false);
  return out;
}

const char* MatmulNodeName(const Tensor& a, const Tensor& b) {
  if (a.dim() == 1 && b.dim() == 1) return "DotBackward0";
  if (a.dim() == 2 && b.dim() == 1) return "MvBackward0";
  if (b.dim() <= 2) return "MmBackward0";
  return "BmmBackward0";
}

// Gradient of b2: (*, k, n) in a2 @ b2 from g2 = d out: (*batch, m, n), summed over broadcast
// batch dims. When b2 is 2-D the batch folds into one GEMM: a2^T (k, rows) @ g2 (rows, n).
Tensor MatmulGradB(const Tensor& a2, const Tensor& b2, const Tensor& g2) {
  if (b2.dim() == 2) {
    Tensor af = RawReshape(a2, {Rows(a2), a2.size(-1)});
    Tensor gf = RawReshape(g2, {Rows(g2), g2.size(-1)});
    return RawMatmul(RawTranspose(af), gf);
  }
  return SumToShape(RawMatmul(RawTranspose(a2), g2), b2.shape());
}

void RecordMatmul(const Tensor& a, const Tensor& b, const Tensor& out, const Shape& full) {
  auto node = Record(MatmulNodeName(a, b), {&a, &b}, [full](Node& n, GradList&& g) {
    const Tensor& a = n.saved(0);
    const Tensor& b = n.saved(1);
    Tensor a2 = a.dim() == 1 ? views::Unsqueeze(a, 0) : a;  // (*, m, k)
    Tensor b2 = b.dim() == 1 ? views::Unsqueeze(b, 1) : b;  // (*, k, n)
    Tensor g2 = RawReshape(g[0], full);                     // (*batch, m, n)
    GradList r(2);
    if (NeedsGrad(n, 0)) {
      Tensor ga = SumToShape(RawMatmul(g2, RawTranspose(b2)), a2.shape());
      r[0] = Reshape(ga, a.shape());
    }
    if (NeedsGrad(n, 1)) r[1] = Reshape(MatmulGradB(a2, b2, g2), b.shape());
    return r;
  });
  node->Save(a);
  node->Save(b);
  SetHistory(out, node);
}

}  // namespace

Tensor Matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = AutocastLow(a_in);
  const Tensor b = AutocastLow(b_in);
  CheckSameFloating(a, b, "matmul");
  TY_CHECK(a.dim() >= 1 && b.dim() >= 1)
      << "matmul: both arguments need at least 1 dim, got shapes " << a.shape() << " and "
      << b.shape();
  Tensor a2 = a.dim() == 1 ? views::Unsqueeze(a, 0) : a;  // (*, m, k)
  Tensor b2 = b.dim() == 1 ? views::Unsqueeze(b, 1) : b;  // (*, k, n)
  TY_CHECK(a2.size(-1) == b2.size(-2))
      << "matmul: shapes " << a.shape() << " and " << b.shape() << " cannot be multiplied ("
      << a2.size(-1) << " != " << b2.size(-2) << ")";
  Tensor full = RawMatmul(a2, b2);  // (*batch, m, n)
  Shape shape = BatchShape(full);
  if (a.dim() > 1) shape.push_back(full.size(-2));
  if (b.dim() > 1) shape.push_back(full.size(-1));
  Tensor out = MakeView(full, shape, ContiguousStrides(shape), full.offset());
  if (ShouldRecord({&a, &b})) RecordMatmul(a, b, out, full.shape());
  return out;
}

namespace {

void CheckLinear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckSameFloating(x, weight, "linear");
  TY_CHECK(weight.dim() == 2) << "linear: weight must be (out_features, in_features), got shape "
                              << weight.shape();
  TY_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1))
      << "linear: input shape " << x.shape() << " must end in in_features " << weight.size(1)
      << " of weight " << weight.shape();
  if (!bias.defined()) return;
  CheckSameFloating(x, bias, "linear");
  TY_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0))
      << "linear: bias shape " << bias.shape() << " must be [" << weight.size(0) << "]";
}

// Note [Padded rows]
// Tensor-core GEMMs want every row of every operand to start on 16 bytes; Hopper's fastest
// kernels (TMA) cannot run otherwise. A linear layer with a wide output whose width is not a
// multiple of 16 bytes, as GPT-2's 50257-token head is, would write its output rows off that
// alignment, and its backward would read them so. On CUDA such an output is allocated with its
// rows padded to a multiple of 16 bytes and returned as the view of its first out_features
// columns (nanoGPT pads the vocabulary itself for this). Cross-entropy reads and writes such
// rows where they lie (ops/loss.cc), so the padding costs no copy on the way to the loss.
// Narrow outputs stay contiguous: padding them would cost more memory than it could gain.
constexpr int64_t kPadRowsFrom = 1024;  // output features

Tensor EmptyLinearOutput(const Shape& shape, const TensorOptions& options) {
  const int64_t n = shape[shape.size() - 1];
  const int64_t per16 = 16 / static_cast<int64_t>(ElementSize(options.dtype));
  if (!options.device.is_cuda() || n < kPadRowsFrom || n % per16 == 0) return Empty(shape, options);
  Shape padded = shape;
  padded[shape.size() - 1] = (n + per16 - 1) / per16 * per16;
  return views::Narrow(Empty(padded, options), -1, 0, n);
}

}  // namespace

Tensor Linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const Tensor x = AutocastLow(x_in);
  const Tensor weight = AutocastLow(weight_in);
  const Tensor bias = AutocastLow(bias_in);
  CheckLinear(x, weight, bias);
  const int64_t in = weight.size(1), out_features = weight.size(0);
  const int64_t rows = Rows(x);
  Shape shape = x.shape();
  shape[x.dim() - 1] = out_features;
  Tensor out = EmptyLinearOutput(shape, x.options());
  Tensor out2 = RawReshape(out, {rows, out_features});  // (rows, out), a view
  // x2: (rows, in) @ weight^T: (in, out). The bias: on CUDA in the GEMM's epilogue; on the
  // CPU its rows are put in place first and the GEMM accumulates onto them (beta = 1).
  if (x.device().is_cuda()) {
    MatmulInto(RawReshape(x, {rows, in}), RawTranspose(weight), out2, false,
               bias.defined() ? ContiguousData(bias) : Tensor());
  } else {
    if (bias.defined()) CopyInto(out2, bias);
    MatmulInto(RawReshape(x, {rows, in}), RawTranspose(weight), out2, bias.defined());
  }
  if (ShouldRecord({&x, &weight, &bias})) {
    auto node = Record(bias.defined() ? "AddmmBackward0" : "MmBackward0", {&x, &weight, &bias},
                       [rows, in, out_features](Node& n, GradList&& g) {
                         const Tensor& x = n.saved(0);
                         const Tensor& w = n.saved(1);
                         Tensor g2 = RawReshape(g[0], {rows, out_features});
                         GradList r(3);
                         if (NeedsGrad(n, 0)) r[0] = Reshape(RawMatmul(g2, w), x.shape());
                         if (NeedsGrad(n, 1))
                           r[1] = RawMatmul(RawTranspose(g2), RawReshape(x, {rows, in}));
                         if (NeedsGrad(n, 2)) r[2] = Sum(g2, {0});
                         return r;
                       });
    node->Save(x);
    node->Save(weight);
    SetHistory(out, node);
  }
  return out;
}

}  // namespace trainyard::ops
