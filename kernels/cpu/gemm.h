// Row-major GEMM: C = alpha * op(A) op(B) + beta * C, op(A) is m x k, op(B) is k x n.
// lda/ldb/ldc are row strides of the stored matrices (A is stored k x m when trans_a).
// Goes through OpenBLAS when the build has it, else a blocked reference kernel.
// T is float or double. beta == 0 ignores C's old contents (NaN included).
//
// Threads: OpenBLAS is kept on one thread (its own pool would compete with ours for the cores);
// a large product is cut into GemmBlocks(m, n, k) blocks of rows or columns of C, shared out
// over the ParallelFor pool. The cut depends on the shape alone, so the result does not depend
// on the thread count (Note [Split GEMM] in gemm.cc). Callers with a batch of products that
// are not cut should spread the batch over threads instead.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

// A block of a cut product has at least kGemmMinWorkPerBlock multiply-adds and is at least
// kGemmMinBlockSide rows (or columns) of C; a product is cut into at most kGemmMaxBlocks.
constexpr int64_t kGemmMinWorkPerBlock = int64_t{1} << 22;
constexpr int64_t kGemmMinBlockSide = 256;
constexpr int64_t kGemmMaxBlocks = 64;

// How many blocks Gemm cuts an (m x k) x (k x n) product into: a power of two, 1 when the
// product is small (or the build has no OpenBLAS). A function of the shape alone.
int64_t GemmBlocks(int64_t m, int64_t n, int64_t k);

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
