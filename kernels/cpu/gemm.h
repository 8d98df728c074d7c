// Row-major GEMM: C = alpha * op(A) op(B) + beta * C, op(A) is m x k, op(B) is k x n.
// lda/ldb/ldc are row strides of the stored matrices (A is stored k x m when trans_a).
// Goes through OpenBLAS when the build has it, else a blocked reference kernel.
// T is float or double. beta == 0 ignores C's old contents (NaN included).
//
// Threads: OpenBLAS is kept on one thread (its own pool would compete with ours for the cores);
// a float product of at least 2 * kGemmMinWorkPerPiece multiply-adds is split into blocks of
// rows or columns of C over the ParallelFor pool. See Note [Split GEMM] in gemm.cc: the
// result does not depend on the thread count. Callers with a batch of smaller products should
// spread the batch over threads instead.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// m * n * k of the smallest block Gemm hands to one thread.
constexpr int64_t kGemmMinWorkPerPiece = int64_t{1} << 22;

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
