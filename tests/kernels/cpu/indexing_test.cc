#include "kernels/cpu/indexing.h"

#include <gtest/gtest.h>

#include <vector>

namespace trainyard::kernels::cpu {
namespace {

TEST(CheckIndicesKernelTest, FindsTheFirstRejectedValueAndReplacesEveryOneInBounds) {
  const std::vector<int64_t> index = {0, 4, 5, -1, 2, 7};
  std::vector<int64_t> out(index.size(), 99);
  EXPECT_EQ(CheckIndices(index.data(), 6, IndexCheck{"op", 0, 5}, out.data()), 2);
  EXPECT_EQ(out, (std::vector<int64_t>{0, 4, 0, 0, 2, 0}));
  EXPECT_EQ(CheckIndices(index.data(), 2, IndexCheck{"op", 0, 5}, nullptr), -1);
  EXPECT_EQ(CheckIndices(index.data(), 0, IndexCheck{"op", 0, 0}, nullptr), -1);
}

TEST(CheckIndicesKernelTest, IgnoreIndexIsValidAndReplacesRejectedTargets) {
  const std::vector<int64_t> target = {-100, 3, 5, -7};
  std::vector<int64_t> out(target.size());
  const IndexCheck check{"cross_entropy", -1, 5, true, -100};
  EXPECT_EQ(CheckIndices(target.data(), 4, check, out.data()), 2);
  EXPECT_EQ(out, (std::vector<int64_t>{-100, 3, -100, -100}));
  // An ignore_index inside the class range is a class like any other.
  const IndexCheck inside{"cross_entropy", -1, 5, true, 0};
  EXPECT_EQ(CheckIndices(target.data(), 4, inside, out.data()), 0);
  EXPECT_EQ(out, (std::vector<int64_t>{0, 3, 0, 0}));
}

}  // namespace
}  // namespace trainyard::kernels::cpu
