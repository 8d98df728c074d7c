#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/iter.h"
#include "kernels/cpu/philox.h"

namespace trainyard::kernels::cpu {
namespace {

TEST(ParallelForTest, CoversEveryIndexExactlyOnce) {
  int saved = GetNumThreads();
  for (int threads : {1, 2, 4}) {
    SetNumThreads(threads);
    std::vector<std::atomic<int>> hits(10007);
    ParallelFor(10007, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  SetNumThreads(saved);
}

TEST(ParallelForTest, NestedCallsRunInline) {
  std::atomic<int64_t> total{0};
  ParallelFor(64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      ParallelFor(100, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 6400);
}

TEST(PhiloxTest, MatchesTheRandom123KnownAnswers) {
  // philox4x32_10 known-answer vectors from Random123 (kat_vectors).
  Philox4x32 zero = Philox(0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
}

TEST(IterTest, CoalescesContiguousDims) {
  int64_t sizes[3] = {2, 3, 4};
  int64_t contiguous[3] = {12, 4, 1};
  const int64_t* strides[2] = {contiguous, contiguous};
  StridedIter it = MakeIter(3, sizes, 2, strides);
  EXPECT_EQ(it.ndim, 1);
  EXPECT_EQ(it.sizes[0], 24);
  int64_t transposed[3] = {1, 2, 6};  // no two dims mergeable
  const int64_t* strides2[2] = {contiguous, transposed};
  EXPECT_EQ(MakeIter(3, sizes, 2, strides2).ndim, 3);
}

TEST(HalfTest, ConvertsSpecialValues) {
  EXPECT_EQ(ToFloat(ToHalf(0.0f)), 0.0f);
  EXPECT_EQ(ToFloat(ToHalf(-1.5f)), -1.5f);
  EXPECT_EQ(ToFloat(ToHalf(6.1035156e-05f)), 6.1035156e-05f);  // smallest normal
  EXPECT_EQ(ToFloat(ToHalf(5.9604645e-08f)), 5.9604645e-08f);  // smallest subnormal
  EXPECT_TRUE(std::isnan(ToFloat(ToHalf(NAN))));
  EXPECT_TRUE(std::isinf(ToFloat(ToHalf(1e9f))));
  EXPECT_EQ(ToFloat(ToBFloat16(1.0f + 1.0f / 256)), 1.0f);  // ties round to even
  EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(NAN))));
}

}  // namespace
}  // namespace trainyard::kernels::cpu
