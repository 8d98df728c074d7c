#include "kernels/cpu/attention.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/softmax.h"

namespace trainyard::kernels::cpu {
namespace {

// Query rows per block: a causal block of rows [r0, r1) sees keys [0, r1) only.
constexpr int64_t kRowBlock = 32;

// Keys visible to query rows [r0, r1), and to query row i.
int64_t KeysForRows(const AttentionDims& d, int64_t r1) {
  return d.causal ? std::min(d.s, r1) : d.s;
}
int64_t KeysForRow(const AttentionDims& d, int64_t i) {
  return d.causal ? std::min(d.s, i + 1) : d.s;
}
// Query rows that see key j: [first, L).
int64_t FirstRowSeeing(const AttentionDims& d, int64_t j) { return d.causal ? j : 0; }

template <typename T>
void ForwardItem(const AttentionDims& d, const T* q, int64_t ldq, const T* k, int64_t ldk,
                 const T* v, int64_t ldv, T* p, T* out) {
  for (int64_t r0 = 0; r0 < d.l; r0 += kRowBlock) {
    const int64_t r1 = std::min(d.l, r0 + kRowBlock), keys = KeysForRows(d, r1);
    // p[r0:r1, :keys] = scale * q[r0:r1] k[:keys]^T
    Gemm<T>(false, true, r1 - r0, keys, d.e, static_cast<T>(d.scale), q + r0 * ldq, ldq, k, ldk,
            T(0), p + r0 * d.s, d.s);
    for (int64_t i = r0; i < r1; ++i) {
      T* row = p + i * d.s;
      const int64_t n = KeysForRow(d, i);
      SoftmaxForward<T>(row, row, 1, n, false);
      std::fill(row + n, row + d.s, T(0));
    }
    // out[r0:r1] = p[r0:r1, :keys] v[:keys]
    Gemm<T>(false, false, r1 - r0, d.ev, keys, T(1), p + r0 * d.s, d.s, v, ldv, T(0),
            out + r0 * d.ev, d.ev);
  }
}

// g[j0:, :] = alpha * m[:, j0:]^T x over the query rows that see keys j0..: the product of a
// transposed (L, S) matrix restricted to the causal triangle, in key blocks.
template <typename T>
void TransposedProduct(const AttentionDims& d, const T* m, const T* x, int64_t ldx, int64_t cols,
                       T alpha, T* g) {
  for (int64_t c0 = 0; c0 < d.s; c0 += kRowBlock) {
    const int64_t c1 = std::min(d.s, c0 + kRowBlock), first = FirstRowSeeing(d, c0);
    if (first >= d.l) {
      std::fill(g + c0 * cols, g + c1 * cols, T(0));
      continue;
    }
    Gemm<T>(true, false, c1 - c0, cols, d.l - first, alpha, m + first * d.s + c0, d.s,
            x + first * ldx, ldx, T(0), g + c0 * cols, cols);
  }
}

template <typename T>
void BackwardItem(const AttentionDims& d, const T* q, int64_t ldq, const T* k, int64_t ldk,
                  const T* v, int64_t ldv, const T* p, const T* gout, T* ds, T* gq, T* gk, T* gv) {
  const T scale = static_cast<T>(d.scale);
  for (int64_t r0 = 0; r0 < d.l; r0 += kRowBlock) {
    const int64_t r1 = std::min(d.l, r0 + kRowBlock), keys = KeysForRows(d, r1);
    // dP = gout v^T, then dS = P * (dP - rowsum(P * dP)) in place.
    Gemm<T>(false, true, r1 - r0, keys, d.ev, T(1), gout + r0 * d.ev, d.ev, v, ldv, T(0),
            ds + r0 * d.s, d.s);
    for (int64_t i = r0; i < r1; ++i) {
      T* row = ds + i * d.s;
      const int64_t n = KeysForRow(d, i);
      SoftmaxBackward<T>(p + i * d.s, row, row, 1, n, false);
      std::fill(row + n, row + d.s, T(0));
    }
    // gq = scale * dS k
    Gemm<T>(false, false, r1 - r0, d.e, keys, scale, ds + r0 * d.s, d.s, k, ldk, T(0),
            gq + r0 * d.e, d.e);
  }
  TransposedProduct(d, p, gout, d.ev, d.ev, T(1), gv);  // gv = P^T gout
  TransposedProduct(d, ds, q, ldq, d.e, scale, gk);     // gk = scale * dS^T q
}

}  // namespace

template <typename T>
void AttentionForward(const AttentionDims& d, const AttentionInput<T>& q,
                      const AttentionInput<T>& k, const AttentionInput<T>& v, T* probs, T* out) {
  ParallelFor(d.batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      ForwardItem(d, q.data + q.offsets[b], q.ld, k.data + k.offsets[b], k.ld,
                  v.data + v.offsets[b], v.ld, probs + b * d.l * d.s, out + b * d.l * d.ev);
    }
  });
}

template <typename T>
void AttentionBackward(const AttentionDims& d, const AttentionInput<T>& q,
                       const AttentionInput<T>& k, const AttentionInput<T>& v, const T* probs,
                       const T* gout, T* gq, T* gk, T* gv) {
  ParallelFor(d.batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> ds(static_cast<size_t>(d.l * d.s));
    for (int64_t b = begin; b < end; ++b) {
      BackwardItem(d, q.data + q.offsets[b], q.ld, k.data + k.offsets[b], k.ld,
                   v.data + v.offsets[b], v.ld, probs + b * d.l * d.s, gout + b * d.l * d.ev,
                   ds.data(), gq + b * d.l * d.e, gk + b * d.s * d.e, gv + b * d.s * d.ev);
    }
  });
}

#define TY_INSTANTIATE(T)                                                                          \
  template void AttentionForward<T>(const AttentionDims&, const AttentionInput<T>&,                \
                                    const AttentionInput<T>&, const AttentionInput<T>&, T*, T*);   \
  template void AttentionBackward<T>(const AttentionDims&, const AttentionInput<T>&,               \
                                     const AttentionInput<T>&, const AttentionInput<T>&, const T*, \
                                     const T*, T*, T*, T*);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
#undef TY_INSTANTIATE

}  // namespace trainyard::kernels::cpu
