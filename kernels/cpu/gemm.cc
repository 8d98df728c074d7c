#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#ifdef TY_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace trainyard::kernels::cpu {
namespace {

// c[0..n) += s * b[0..n)
template <typename T>
TY_SIMD void Axpy(T* c, const T* b, T s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) c[j] += s * b[j];
}

}  // namespace

template <typename T>
void GemmReference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                   int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  // Materialise op(B) row-major so that the inner loop is a contiguous axpy.
  std::vector<T> bt;
  const T* bp = b;
  int64_t ldbp = ldb;
  if (trans_b) {
    bt.resize(static_cast<size_t>(k * n));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) bt[p * n + j] = b[j * ldb + p];
    bp = bt.data();
    ldbp = n;
  }
  ParallelFor(m, GrainFor(n * k), [&](int64_t lo, int64_t hi) {
    std::vector<T> row(static_cast<size_t>(n));
    for (int64_t i = lo; i < hi; ++i) {
      std::fill(row.begin(), row.end(), T(0));
      for (int64_t p = 0; p < k; ++p) {
        T av = trans_a ? a[p * lda + i] : a[i * lda + p];
        if (av != T(0)) Axpy(row.data(), bp + p * ldbp, av, n);
      }
      T* ci = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) ci[j] = alpha * row[j] + (beta == T(0) ? T(0) : beta * ci[j]);
    }
  });
}

#ifdef TY_HAVE_OPENBLAS
namespace {

// Note [Split GEMM]
// OpenBLAS runs on one thread here: its pthread pool spins after each call and would compete
// with the ParallelFor pool for the same cores. A large product is instead cut into blocks of
// rows (or columns) of C, one cblas_?gemm per block, the blocks shared out over the pool.
// How a product is cut depends on its shape alone (GemmBlocks), never on the thread count or
// on whether the caller is already inside a ParallelFor: the same calls run whatever the
// pool, so results are bit for bit the same with 1, 2 or 64 threads. (Cutting one block per
// thread does not give that: OpenBLAS's micro-kernels take the edge of a matrix down a
// different path, so an element's sum over k can change with the block it lands in.)
// Blocks are at least kGemmMinBlockSide wide, so the repacking of the uncut operand per block
// costs a few percent of one call; their count is a power of two, so 2, 4, 8... threads share
// them evenly.

void BlasGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void BlasGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
              const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
              int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void KeepBlasOnOneThread() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace
#endif

int64_t GemmBlocks(int64_t m, int64_t n, int64_t k) {
#ifdef TY_HAVE_OPENBLAS
  const int64_t most = std::min(
      {m * n * k / kGemmMinWorkPerBlock, std::max(m, n) / kGemmMinBlockSide, kGemmMaxBlocks});
  int64_t blocks = 1;
  while (blocks * 2 <= most) blocks *= 2;
  return blocks;
#else
  (void)m, (void)n, (void)k;
  return 1;
#endif
}

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#ifdef TY_HAVE_OPENBLAS
  if (k > 0) {
    KeepBlasOnOneThread();
    const int64_t pieces = GemmBlocks(m, n, k);
    if (pieces == 1) {
      BlasGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    // Cut the longer side of C; op(A) is (m, k) and op(B) is (k, n).
    const bool by_rows = m >= n;
    ParallelFor(pieces, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        if (by_rows) {
          const int64_t r0 = m * p / pieces, r1 = m * (p + 1) / pieces;
          const T* ap = trans_a ? a + r0 : a + r0 * lda;
          BlasGemm(trans_a, trans_b, r1 - r0, n, k, alpha, ap, lda, b, ldb, beta, c + r0 * ldc,
                   ldc);
        } else {
          const int64_t c0 = n * p / pieces, c1 = n * (p + 1) / pieces;
          const T* bp = trans_b ? b + c0 * ldb : b + c0;
          BlasGemm(trans_a, trans_b, m, c1 - c0, k, alpha, a, lda, bp, ldb, beta, c + c0, ldc);
        }
      }
    });
    return;
  }
#endif
  GemmReference(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool GemmUsesBlas() {
#ifdef TY_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

#define TY_INSTANTIATE(T)                                                                      \
  template void Gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, \
                        int64_t, T, T*, int64_t);                                              \
  template void GemmReference<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t,  \
                                 const T*, int64_t, T, T*, int64_t);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
#undef TY_INSTANTIATE

}  // namespace trainyard::kernels::cpu
