#include "worker/data/token_dataset.h"

#include <gtest/gtest.h>

namespace trainyard::data {
namespace {

std::vector<uint16_t> Stream(int n) {
  std::vector<uint16_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<uint16_t>(1000 + 3 * i));
  return t;
}

TEST(TokenDatasetTest, WindowsAreContextLongWithTargetsShiftedByOne) {
  StatusOr<TokenDataset> ds = TokenDataset::Create(Stream(10), 4);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 6);  // windows start at 0..5; the last target is token 9
  Batch b = ds->Get({5, 0, 2});
  EXPECT_EQ(b.input.shape(), Shape({3, 4}));
  EXPECT_EQ(b.target.shape(), Shape({3, 4}));
  EXPECT_EQ(b.input.dtype(), DType::kInt64);
  EXPECT_EQ(b.target.dtype(), DType::kInt64);
  const std::vector<int64_t> x = ToVector<int64_t>(b.input);
  const std::vector<int64_t> y = ToVector<int64_t>(b.target);
  const int64_t starts[3] = {5, 0, 2};
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(x[r * 4 + t], 1000 + 3 * (starts[r] + t)) << r << "," << t;
      EXPECT_EQ(y[r * 4 + t], 1000 + 3 * (starts[r] + t + 1)) << r << "," << t;
    }
  }
}

TEST(TokenDatasetTest, TheTargetOfOneWindowIsTheInputOfTheNextShifted) {
  StatusOr<TokenDataset> ds = TokenDataset::Create(Stream(7), 3);
  ASSERT_TRUE(ds.ok());
  Batch b = ds->Get({1, 2});
  std::vector<int64_t> x = ToVector<int64_t>(b.input), y = ToVector<int64_t>(b.target);
  EXPECT_EQ(std::vector<int64_t>(y.begin(), y.begin() + 3),
            std::vector<int64_t>(x.begin() + 3, x.end()));
}

TEST(TokenDatasetTest, AStreamTooShortForOneWindowIsAnError) {
  StatusOr<TokenDataset> ds = TokenDataset::Create(Stream(4), 4);
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("at least 5 tokens"), std::string::npos) << ds.status();
  EXPECT_TRUE(TokenDataset::Create(Stream(5), 4).ok());
  EXPECT_FALSE(TokenDataset::Create(Stream(5), 0).ok());
}

TEST(TokenDatasetTest, SplitTokensHoldsOutTheTail) {
  StatusOr<TokenSplit> s = SplitTokens(Stream(10), 0.3);
  ASSERT_TRUE(s.ok());
  const std::vector<uint16_t> all = Stream(10);
  EXPECT_EQ(s->train, std::vector<uint16_t>(all.begin(), all.begin() + 7));
  EXPECT_EQ(s->eval, std::vector<uint16_t>(all.begin() + 7, all.end()));
  EXPECT_FALSE(SplitTokens(all, 1.0).ok());
  EXPECT_FALSE(SplitTokens(all, -0.1).ok());
}

}  // namespace
}  // namespace trainyard::data
