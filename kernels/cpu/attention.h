// Scaled dot-product attention without a mask or with the causal one, forward and backward,
// per batch item through small GEMMs and a row softmax (the reference is the composition in
// worker/ops/attention.cc: Matmul, MulScalar, Where, Softmax, Matmul). For query i and key j:
//   P = softmax_j(scale * q_i . k_j) over the keys i may see (j <= i when causal, else all)
//   out_i = sum_j P_ij v_j
// The causal product skips key blocks a query row block cannot see. Each batch item is
// computed by one thread, so results do not depend on the thread count. T is float or double.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

struct AttentionDims {
  int64_t batch = 1;
  int64_t l = 1;   // queries, at least 1
  int64_t s = 1;   // keys and values, at least 1
  int64_t e = 1;   // query and key size
  int64_t ev = 1;  // value size
  bool causal = false;
  double scale = 1;
};

// Batch item b of an input is the matrix at data + offsets[b], rows ld apart, unit columns.
template <typename T>
struct AttentionInput {
  const T* data;
  const int64_t* offsets;  // `batch` entries
  int64_t ld;
};

// q: (L, E), k: (S, E), v: (S, Ev) per item. Writes probs (batch, L, S) contiguous (zeros
// where masked), which the backward reads, and out (batch, L, Ev) contiguous.
template <typename T>
void AttentionForward(const AttentionDims& d, const AttentionInput<T>& q,
                      const AttentionInput<T>& k, const AttentionInput<T>& v, T* probs, T* out);

// From gout (batch, L, Ev) contiguous: gq (batch, L, E), gk (batch, S, E), gv (batch, S, Ev),
// all contiguous and overwritten.
template <typename T>
void AttentionBackward(const AttentionDims& d, const AttentionInput<T>& q,
                       const AttentionInput<T>& k, const AttentionInput<T>& v, const T* probs,
                       const T* gout, T* gq, T* gk, T* gv);

}  // namespace trainyard::kernels::cpu
