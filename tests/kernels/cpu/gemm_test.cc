#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace trainyard::kernels::cpu {
namespace {

template <typename T>
std::vector<T> RandomVector(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(*rng));
  return v;
}

// C = alpha op(A) op(B) + beta C by the definition, in double.
template <typename T>
std::vector<T> Naive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const std::vector<T>& a, int64_t lda, const std::vector<T>& b, int64_t ldb,
                     double beta, std::vector<T> c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
             static_cast<double>(tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = static_cast<T>(alpha * s + beta * c[i * ldc + j]);
    }
  return c;
}

template <typename T>
void CheckAllCombinations(double tol) {
  std::mt19937 rng(7);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> sizes = {
      {1, 1, 1}, {7, 5, 3}, {13, 17, 11}, {33, 9, 65}, {2, 70, 1}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : sizes) {
        SCOPED_TRACE(::testing::Message()
                     << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k);
        // Padded leading dimensions, so that ld != row length is exercised.
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
        auto a = RandomVector<T>((ta ? k : m) * lda, &rng);
        auto b = RandomVector<T>((tb ? n : k) * ldb, &rng);
        auto c0 = RandomVector<T>(m * ldc, &rng);
        auto fast = c0, ref = c0;
        Gemm<T>(ta, tb, m, n, k, T(1.5), a.data(), lda, b.data(), ldb, T(0.5), fast.data(), ldc);
        GemmReference<T>(ta, tb, m, n, k, T(1.5), a.data(), lda, b.data(), ldb, T(0.5), ref.data(),
                         ldc);
        auto naive = Naive<T>(ta, tb, m, n, k, 1.5, a, lda, b, ldb, 0.5, c0, ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const int64_t o = i * ldc + j;
            ASSERT_NEAR(fast[o], ref[o], tol) << "at (" << i << ", " << j << ")";
            ASSERT_NEAR(ref[o], naive[o], tol) << "at (" << i << ", " << j << ")";
          }
      }
}

TEST(GemmTest, MatchesTheReferenceOnOddSizesForEveryTransposeCombinationInFloat) {
  CheckAllCombinations<float>(1e-4);
}

TEST(GemmTest, MatchesTheReferenceOnOddSizesForEveryTransposeCombinationInDouble) {
  CheckAllCombinations<double>(1e-12);
}

TEST(GemmTest, BetaZeroIgnoresNanInTheOutput) {
  std::vector<double> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  std::vector<double> c(4, std::nan(""));
  Gemm<double>(false, false, 2, 2, 2, 1.0, a.data(), 2, b.data(), 2, 0.0, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{19, 22, 43, 50}));
}

// Large enough to be cut into blocks (Note [Split GEMM]); odd sizes, both cut directions
// (m >= n cuts rows, m < n columns), every transpose, beta 0 and 1.
template <typename T>
void CheckBitwiseIdenticalForAnyThreadCount() {
  std::mt19937 rng(11);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> sizes = {
      {601, 97, 419}, {45, 1713, 257}, {2048, 256, 64}, {128, 1031, 784}};
  const int before = GetNumThreads();
  for (auto [m, n, k] : sizes) {
    ASSERT_GT(GemmBlocks(m, n, k), 1) << m << "x" << n << "x" << k << " is not cut";
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k);
        const int64_t lda = ta ? m : k, ldb = tb ? k : n;
        auto a = RandomVector<T>(m * k, &rng);
        auto b = RandomVector<T>(k * n, &rng);
        auto c0 = RandomVector<T>(m * n, &rng);
        auto run = [&](int threads, T beta) {
          SetNumThreads(threads);
          std::vector<T> c = c0;
          Gemm<T>(ta, tb, m, n, k, T(1), a.data(), lda, b.data(), ldb, beta, c.data(), n);
          return c;
        };
        for (T beta : {T(0), T(1)}) {
          const std::vector<T> one = run(1, beta), two = run(2, beta), three = run(3, beta);
          EXPECT_EQ(one, two) << "beta=" << beta;
          EXPECT_EQ(one, three) << "beta=" << beta;
        }
      }
  }
  SetNumThreads(before);
}

TEST(GemmTest, LargeFloatProductsAreBitwiseIdenticalForAnyThreadCount) {
  CheckBitwiseIdenticalForAnyThreadCount<float>();
}

TEST(GemmTest, LargeDoubleProductsAreBitwiseIdenticalForAnyThreadCount) {
  CheckBitwiseIdenticalForAnyThreadCount<double>();
}

TEST(GemmTest, TheCutDependsOnTheShapeAloneAndKeepsBlocksLarge) {
  if (!GemmUsesBlas()) GTEST_SKIP() << "the reference kernel is never cut";
  EXPECT_EQ(GemmBlocks(64, 64, 64), 1);      // less work than two blocks
  EXPECT_EQ(GemmBlocks(200, 200, 4096), 1);  // narrower than two blocks
  EXPECT_EQ(GemmBlocks(768, 64, 1024), 2);   // 3 blocks wide, rounded down to a power of two
  const int before = GetNumThreads();
  for (int threads : {1, 2, 5}) {
    SetNumThreads(threads);
    EXPECT_EQ(GemmBlocks(2048, 2048, 2048), 8) << threads << " threads";
    EXPECT_EQ(GemmBlocks(1024, 384, 1024), 4) << threads << " threads";
    EXPECT_EQ(GemmBlocks(int64_t{1} << 20, 16, 8), 32) << threads << " threads";
  }
  SetNumThreads(before);
}

}  // namespace
}  // namespace trainyard::kernels::cpu
