// Scaled dot-product attention (float32/float64) as
// torch.nn.functional.scaled_dot_product_attention without dropout. Without a mask (causal or
// not) and with q, k and v of the same batch dims it runs the fused kernel of
// kernels/cpu/attention.h with its own backward; otherwise (and as the reference the fused
// kernel is tested against) it is composed of differentiable ops (Matmul, Where, Softmax).
#pragma once

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

// q: (*, L, E), k: (*, S, E), v: (*, S, Ev) -> (*, L, Ev), batch dims broadcast:
//   softmax(q k^T * scale + mask) v
// attn_mask, broadcast to (*, L, S): bool (or uint8) where true means "may attend", or
// floating and added to the scores. is_causal lets query i attend to keys j <= i (the
// top-left aligned torch.tril(ones(L, S))); it cannot be combined with attn_mask. scale 0
// means 1 / sqrt(E). A query that may attend to no key gets NaN, as in PyTorch's math path.
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 bool is_causal = false, const Tensor& attn_mask = Tensor(),
                                 double scale = 0);

}  // namespace trainyard::ops
