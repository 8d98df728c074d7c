#include "worker/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/attention.h"
#include "worker/ops/common.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/record.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

constexpr const char* kName = "scaled_dot_product_attention";

void CheckAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                    const Tensor& attn_mask) {
  CheckSameFloating(q, k, kName);
  CheckSameFloating(q, v, kName);
  TY_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2)
      << kName << ": q, k and v must be (*, L, E), (*, S, E) and (*, S, Ev), got shapes "
      << q.shape() << ", " << k.shape() << " and " << v.shape();
  TY_CHECK(q.size(-1) == k.size(-1))
      << kName << ": query size E " << q.size(-1) << " differs from the key size " << k.size(-1);
  TY_CHECK(k.size(-2) == v.size(-2))
      << kName << ": " << k.size(-2) << " keys but " << v.size(-2) << " values";
  TY_CHECK(!(is_causal && attn_mask.defined()))
      << kName << ": pass either is_causal or attn_mask, not both";
}

// keep[i, j] = j <= i: (L, S) bool on `device`.
Tensor CausalKeep(int64_t l, int64_t s, Device device) {
  Tensor keep = Le(Reshape(Arange(s), {1, s}), Reshape(Arange(l), {l, 1}));
  return device.is_cpu() ? keep : CopyToDevice(keep, device);
}

// The CUDA fused kernel (flash-attention style, kernels/cuda/attention.cu) takes what the CPU
// one does (causal keeps key j <= query i, also when l != s), with value size equal to the
// query size, where the device has the shared memory for its tiles (AttentionFits: head sizes
// up to 128, fewer on some GPUs).
bool UseCudaFusedKernel(const Tensor& q, const Tensor& v) {
  return q.device().is_cuda() && q.size(-1) == v.size(-1) &&
         CudaBackend().AttentionFits(q.device().index, ToScalarType(q.dtype()), q.size(-1));
}

// Whether the CUDA kernels address t (*, rows, e) where it is (kernels/cuda/backend.h
// AttentionTensor): unit stride along e, and the dims before the heads' (-3) collapsing into
// one stride, which goes to *outer.
bool CudaAddressable(const Tensor& t, int64_t* outer) {
  if (t.size(-1) > 1 && t.stride(-1) != 1) return false;
  *outer = 0;
  int64_t next = -1;  // the stride the next dim out must have
  for (int64_t d = t.dim() - 4; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (next >= 0 && t.stride(d) != next) return false;
    if (next < 0) *outer = t.stride(d);
    next = t.stride(d) * t.size(d);
  }
  return true;
}

// t as an operand of the CUDA kernels: where it is, as the heads that a model's q, k and v
// are of its (B, T, 3, H, E) projection, or a contiguous copy where they cannot address it.
struct CudaOperand {
  Tensor data;  // t or its copy: what `at` points into
  kernels::cuda::AttentionTensor at;

  explicit CudaOperand(const Tensor& t) : data(t) {
    int64_t outer = 0;
    if (!CudaAddressable(t, &outer)) {
      data = ContiguousData(t);
      TY_CHECK(CudaAddressable(data, &outer));
    }
    // A size-1 dim's stride is never used (and may be anything): 0, so that it does not keep
    // the tensor-core kernels from checking the operand's alignment.
    at.data = data.raw_data();
    at.outer = outer;
    at.inner = data.dim() >= 3 && data.size(-3) > 1 ? data.stride(-3) : 0;
    at.row = data.size(-2) > 1 ? data.stride(-2) : 0;
  }
};

// An uninitialised tensor shaped as `like`, its strides dense in the order of like's (e
// innermost), as PyTorch's empty_like gives its flash attention: the output and gradients of
// heads strided in a (B, T, H, E) array are laid out (B, T, H, E) too, so putting the heads
// side by side and the projection's backward read them where they are. Contiguous where that
// order is not one the kernels address.
Tensor EmptyOperandLike(const Tensor& like) {
  const int64_t n = like.dim();
  std::vector<int64_t> order(n - 1);  // like's dims, outermost in memory first; e goes last
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  order.push_back(n - 1);
  std::vector<int64_t> sizes(n), inverse(n);
  for (int64_t i = 0; i < n; ++i) {
    sizes[i] = like.size(order[i]);
    inverse[order[i]] = i;
  }
  Tensor t = views::Permute(Empty(Shape(sizes), like.options()), Shape(inverse));
  int64_t outer = 0;
  return CudaAddressable(t, &outer) ? t : Empty(like.shape(), like.options());
}

// Whether q, k and v are the three equal slices of one dense array, d elements apart, as a
// model's q, k and v are of its qkv projection: then their gradients are laid out the same way
// in one new array, which the projection's split takes back whole (ops::Split) instead of
// copying each into place. The stacked (3, *q) view with strides (d, *q's) must cover its
// elements once each.
bool PackedSlices(const Tensor& q, const Tensor& k, const Tensor& v, int64_t* d) {
  *d = k.offset() - q.offset();
  if (q.storage() != k.storage() || q.storage() != v.storage() || q.shape() != k.shape() ||
      q.shape() != v.shape() || q.strides() != k.strides() || q.strides() != v.strides() ||
      q.dtype() != k.dtype() || q.dtype() != v.dtype() || *d <= 0 ||
      v.offset() - k.offset() != *d) {
    return false;
  }
  std::vector<std::pair<int64_t, int64_t>> dims{{*d, 3}};  // (stride, size)
  for (int64_t i = 0; i < q.dim(); ++i) {
    if (q.size(i) != 1) dims.emplace_back(q.stride(i), q.size(i));
  }
  std::sort(dims.begin(), dims.end());
  int64_t dense = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != dense) return false;
    dense *= size;
  }
  return true;
}

kernels::cuda::AttentionArgs CudaArgs(const Tensor& q, const Tensor& k, bool is_causal,
                                      double scale) {
  kernels::cuda::AttentionArgs a;
  a.type = ToScalarType(q.dtype());
  a.l = q.size(-2);
  a.s = k.size(-2);
  a.e = q.size(-1);
  a.batch = q.numel() / (a.l * a.e);
  a.heads = q.dim() >= 3 ? q.size(-3) : 1;
  a.causal = is_causal;
  a.scale = scale;
  return a;
}

GradList CudaAttentionBackward(const Node& n, const Tensor& gout, bool is_causal, double scale) {
  const Tensor &q = n.saved(0), &k = n.saved(1), &v = n.saved(2), &out = n.saved(3);
  const Tensor& lse = n.saved(4);
  Tensor gq, gk, gv;
  int64_t d = 0;
  if (PackedSlices(q, k, v, &d)) {
    const Tensor packed = Empty({3 * q.numel()}, q.options());
    gq = MakeView(packed, q.shape(), q.strides(), 0);
    gk = MakeView(packed, q.shape(), q.strides(), d);
    gv = MakeView(packed, q.shape(), q.strides(), 2 * d);
  } else {
    gq = EmptyOperandLike(q), gk = EmptyOperandLike(k), gv = EmptyOperandLike(v);
  }
  // Saved addressable, so only gout may be copied; each holds what its `at` points into.
  const CudaOperand cq(q), ck(k), cv(v), co(out), cg(gout), cgq(gq), cgk(gk), cgv(gv);
  kernels::cuda::AttentionArgs a = CudaArgs(q, k, is_causal, scale);
  a.q = cq.at;
  a.k = ck.at;
  a.v = cv.at;
  a.out = co.at;
  a.lse = lse.data<float>();
  a.gout = cg.at;
  a.gq = cgq.at;
  a.gk = cgk.at;
  a.gv = cgv.at;
  CudaBackend().AttentionBackward(a, ComputeStream(q.device()));
  GradList r(3);
  if (NeedsGrad(n, 0)) r[0] = gq;
  if (NeedsGrad(n, 1)) r[1] = gk;
  if (NeedsGrad(n, 2)) r[2] = gv;
  return r;
}

// q: (*, L, E), k and v: (*, S, E) on CUDA, through the fused kernel, read where they are
// (CudaOperand); saves them, out and the rows' log-sum-exp (f32) for the backward, which
// recomputes the probabilities.
Tensor CudaFusedAttention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                          bool is_causal, double scale) {
  Tensor out = EmptyOperandLike(q_in);
  const CudaOperand q(q_in), k(k_in), v(v_in), o(out);
  kernels::cuda::AttentionArgs a = CudaArgs(q_in, k_in, is_causal, scale);
  Tensor lse = Empty({a.batch, a.l}, q_in.options().set_dtype(DType::kFloat32));
  a.q = q.at;
  a.k = k.at;
  a.v = v.at;
  a.out = o.at;
  a.lse = lse.data<float>();
  CudaBackend().AttentionForward(a, ComputeStream(q_in.device()));
  if (ShouldRecord({&q_in, &k_in, &v_in})) {
    auto node = Record("ScaledDotProductFlashAttentionBackward0", {&q_in, &k_in, &v_in},
                       [is_causal, scale](Node& n, GradList&& g) {
                         return CudaAttentionBackward(n, g[0], is_causal, scale);
                       });
    node->Save(q.data);
    node->Save(k.data);
    node->Save(v.data);
    node->Save(out, /*is_output=*/true);
    node->Save(lse);
    SetHistory(out, node);
  }
  return out;
}

// The fused kernel (kernels/cpu/attention.h) takes attention without a mask, or causal,
// when q, k and v have the same batch dims (no broadcasting) and no size is 0.
bool UseFusedKernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask) {
  if (attn_mask.defined() || q.dim() != k.dim() || q.dim() != v.dim()) return false;
  for (int64_t d = 0; d + 2 < q.dim(); ++d)
    if (q.size(d) != k.size(d) || q.size(d) != v.size(d)) return false;
  return q.size(-2) > 0 && k.size(-2) > 0 && q.size(-1) > 0 && v.size(-1) > 0 && q.numel() > 0;
}

// A (*, rows, cols) tensor as the kernel reads it: unit column stride (else a contiguous
// copy), rows `ld` apart, and each batch item's element offset.
struct FusedInput {
  Tensor data;
  std::vector<int64_t> offsets;
  int64_t ld = 0;

  explicit FusedInput(const Tensor& t) : data(t) {
    const int64_t rows = t.size(-2), cols = t.size(-1);
    if (t.stride(-1) != 1 || (rows > 1 && t.stride(-2) < cols)) data = ContiguousData(t);
    ld = rows > 1 ? data.stride(-2) : cols;
    offsets.assign(1, 0);
    for (int64_t d = 0; d + 2 < data.dim(); ++d) {
      std::vector<int64_t> next;
      next.reserve(offsets.size() * data.size(d));
      for (int64_t base : offsets)
        for (int64_t i = 0; i < data.size(d); ++i) next.push_back(base + i * data.stride(d));
      offsets.swap(next);
    }
  }

  template <typename T>
  kc::AttentionInput<T> View() const {
    return kc::AttentionInput<T>{data.data<T>(), offsets.data(), ld};
  }
};

kc::AttentionDims FusedDims(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                            double scale) {
  kc::AttentionDims d;
  d.batch = q.numel() / (q.size(-2) * q.size(-1));
  d.l = q.size(-2);
  d.s = k.size(-2);
  d.e = q.size(-1);
  d.ev = v.size(-1);
  d.causal = is_causal;
  d.scale = scale;
  return d;
}

// The dims of q, k or v with the last two replaced.
Shape WithMatrix(const Tensor& t, int64_t rows, int64_t cols) {
  Shape shape = t.shape();
  shape[t.dim() - 2] = rows;
  shape[t.dim() - 1] = cols;
  return shape;
}

GradList FusedAttentionBackward(const Node& n, const Tensor& gout, bool is_causal, double scale) {
  const Tensor &q = n.saved(0), &k = n.saved(1), &v = n.saved(2), &probs = n.saved(3);
  const kc::AttentionDims d = FusedDims(q, k, v, is_causal, scale);
  const FusedInput fq(q), fk(k), fv(v);
  Tensor g = ContiguousData(gout);
  Tensor gq = Empty(q.shape(), q.options()), gk = Empty(k.shape(), k.options());
  Tensor gv = Empty(v.shape(), v.options());
  TY_DISPATCH_FLOATING(q.dtype(), "scaled_dot_product_attention backward", [&] {
    kc::AttentionBackward<scalar_t>(d, fq.View<scalar_t>(), fk.View<scalar_t>(),
                                    fv.View<scalar_t>(), probs.data<scalar_t>(), g.data<scalar_t>(),
                                    gq.data<scalar_t>(), gk.data<scalar_t>(), gv.data<scalar_t>());
  });
  GradList r(3);
  if (NeedsGrad(n, 0)) r[0] = gq;
  if (NeedsGrad(n, 1)) r[1] = gk;
  if (NeedsGrad(n, 2)) r[2] = gv;
  return r;
}

Tensor FusedAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                      double scale) {
  const kc::AttentionDims d = FusedDims(q, k, v, is_causal, scale);
  const FusedInput fq(q), fk(k), fv(v);
  Tensor probs = Empty(WithMatrix(q, d.l, d.s), q.options());
  Tensor out = Empty(WithMatrix(q, d.l, d.ev), q.options());
  TY_DISPATCH_FLOATING(q.dtype(), kName, [&] {
    kc::AttentionForward<scalar_t>(d, fq.View<scalar_t>(), fk.View<scalar_t>(), fv.View<scalar_t>(),
                                   probs.data<scalar_t>(), out.data<scalar_t>());
  });
  if (ShouldRecord({&q, &k, &v})) {
    auto node = Record("ScaledDotProductFlashAttentionForCpuBackward0", {&q, &k, &v},
                       [is_causal, scale](Node& n, GradList&& g) {
                         return FusedAttentionBackward(n, g[0], is_causal, scale);
                       });
    node->Save(q);
    node->Save(k);
    node->Save(v);
    node->Save(probs);
    SetHistory(out, node);
  }
  return out;
}

}  // namespace

Tensor ScaledDotProductAttention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                 bool is_causal, const Tensor& attn_mask, double scale) {
  const Tensor q = AutocastLow(q_in);
  const Tensor k = AutocastLow(k_in);
  const Tensor v = AutocastLow(v_in);
  CheckAttention(q, k, v, is_causal, attn_mask);
  const int64_t l = q.size(-2), s = k.size(-2);
  const double sc = scale == 0 ? 1 / std::sqrt(static_cast<double>(q.size(-1))) : scale;
  if (UseFusedKernel(q, k, v, attn_mask)) {
    if (UseCudaFusedKernel(q, v)) return CudaFusedAttention(q, k, v, is_causal, sc);
    if (q.device().is_cpu()) return FusedAttention(q, k, v, is_causal, sc);
  }
  // The reference: composed of differentiable ops.
  Tensor scores = MulScalar(Matmul(q, Transpose(k, -2, -1)), sc);  // (*, L, S)
  const Tensor blocked = Scalar(-std::numeric_limits<double>::infinity(), q.options());
  if (is_causal) {
    scores = Where(CausalKeep(l, s, q.device()), scores, blocked);
  } else if (attn_mask.defined() &&
             (attn_mask.dtype() == DType::kBool || attn_mask.dtype() == DType::kUInt8)) {
    scores = Where(attn_mask, scores, blocked);
  } else if (attn_mask.defined()) {
    CheckSameFloating(q, attn_mask, kName);
    scores = Add(scores, attn_mask);
  }
  return Matmul(Softmax(scores, -1), v);  // (*, L, Ev)
}

}  // namespace trainyard::ops
