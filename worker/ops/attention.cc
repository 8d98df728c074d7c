#include "worker/ops/attention.h"

#include <cmath>
#include <limits>
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

GradList CudaAttentionBackward(const Node& n, const Tensor& gout, bool is_causal, double scale) {
  const Tensor &q = n.saved(0), &k = n.saved(1), &v = n.saved(2), &out = n.saved(3);
  const Tensor& lse = n.saved(4);
  const int64_t l = q.size(-2), s = k.size(-2), e = q.size(-1);
  const int64_t batch = q.numel() / (l * e);
  Tensor g = ContiguousData(gout);
  Tensor gq = Empty(q.shape(), q.options()), gk = Empty(k.shape(), k.options());
  Tensor gv = Empty(v.shape(), v.options());
  CudaBackend().AttentionBackward(ToScalarType(q.dtype()), batch, l, s, e, is_causal, scale,
                                  q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
                                  lse.data<float>(), g.raw_data(), gq.raw_data(), gk.raw_data(),
                                  gv.raw_data(), ComputeStream(q.device()));
  GradList r(3);
  if (NeedsGrad(n, 0)) r[0] = gq;
  if (NeedsGrad(n, 1)) r[1] = gk;
  if (NeedsGrad(n, 2)) r[2] = gv;
  return r;
}

// q: (*, L, E), k and v: (*, S, E) on CUDA, through the fused kernel; saves out and the rows'
// log-sum-exp (f32) for the backward, which recomputes the probabilities.
Tensor CudaFusedAttention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                          bool is_causal, double scale) {
  Tensor q = ContiguousData(q_in), k = ContiguousData(k_in), v = ContiguousData(v_in);
  const int64_t l = q.size(-2), s = k.size(-2), e = q.size(-1);
  const int64_t batch = q.numel() / (l * e);
  Tensor out = Empty(q.shape(), q.options());
  Tensor lse = Empty({batch, l}, q.options().set_dtype(DType::kFloat32));
  CudaBackend().AttentionForward(ToScalarType(q.dtype()), batch, l, s, e, is_causal, scale,
                                 q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
                                 lse.data<float>(), ComputeStream(q.device()));
  if (ShouldRecord({&q_in, &k_in, &v_in})) {
    auto node = Record("ScaledDotProductFlashAttentionBackward0", {&q_in, &k_in, &v_in},
                       [is_causal, scale](Node& n, GradList&& g) {
                         return CudaAttentionBackward(n, g[0], is_causal, scale);
                       });
    node->Save(q);
    node->Save(k);
    node->Save(v);
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
