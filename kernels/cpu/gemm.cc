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

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#ifdef TY_HAVE_OPENBLAS
  if (k > 0) {
    const auto ta = trans_a ? CblasTrans : CblasNoTrans;
    const auto tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (sizeof(T) == 4) {
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
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
