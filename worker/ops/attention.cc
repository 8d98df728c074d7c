#include "worker/ops/attention.h"

#include <cmath>
#include <limits>

#include "worker/ops/common.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"

namespace trainyard::ops {

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

// keep[i, j] = j <= i: (L, S) bool.
Tensor CausalKeep(int64_t l, int64_t s) {
  return Le(Reshape(Arange(s), {1, s}), Reshape(Arange(l), {l, 1}));
}

}  // namespace

Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                 const Tensor& attn_mask, double scale) {
  CheckAttention(q, k, v, is_causal, attn_mask);
  const int64_t l = q.size(-2), s = k.size(-2);
  const double sc = scale == 0 ? 1 / std::sqrt(static_cast<double>(q.size(-1))) : scale;
  Tensor scores = MulScalar(Matmul(q, Transpose(k, -2, -1)), sc);  // (*, L, S)
  const Tensor blocked = Scalar(-std::numeric_limits<double>::infinity(), q.options());
  if (is_causal) {
    scores = Where(CausalKeep(l, s), scores, blocked);
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
