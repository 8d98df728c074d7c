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
// with the ParallelFor pool for the same cores. A large float product is instead cut into
// `pieces` blocks of rows (or columns) of C, one cblas_sgemm per block, one block per thread.
// OpenBLAS computes each element of C the same way whatever the block it sits in, as long as
// the block is far from the small-matrix kernels (which it picks below m * n * k = 1e6): every
// element sums over k in the same panels in the same order. So with blocks of at least
// kGemmMinWorkPerPiece, results are bit for bit those of one call, for any thread count
// (tests/kernels/cpu/gemm_test.cc checks this). dgemm does not have that property (its
// results move with the block shape), so double products always run as one call.

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

// How many blocks to cut a product into: one per thread, each at least kGemmMinWorkPerPiece.
template <typename T>
int64_t GemmPieces(int64_t m, int64_t n, int64_t k) {
  if (sizeof(T) != sizeof(float) || internal::InParallelRegion()) return 1;
  const int64_t threads = GetNumThreads();
  if (threads <= 1) return 1;
  const int64_t by_work = m * n * k / kGemmMinWorkPerPiece;
  return std::max<int64_t>(1, std::min({threads, by_work, std::max(m, n)}));
}

}  // namespace
#endif

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#ifdef TY_HAVE_OPENBLAS
  if (k > 0) {
    KeepBlasOnOneThread();
    const int64_t pieces = GemmPieces<T>(m, n, k);
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
