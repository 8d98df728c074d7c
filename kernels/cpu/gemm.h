// Row-major GEMM: C = alpha * op(A) op(B) + beta * C, op(A) is m x k, op(B) is k x n.
// lda/ldb/ldc are row strides of the stored matrices (A is stored k x m when trans_a).
// Goes through OpenBLAS when the build has it, else a blocked reference kernel.
// T is float or double. beta == 0 ignores C's old contents (NaN included).
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// The reference kernel, always available (tests compare the fast path against it).
template <typename T>
void GemmReference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                   int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// True when Gemm uses OpenBLAS.
bool GemmUsesBlas();

}  // namespace trainyard::kernels::cpu
