#include "worker/data/dataset.h"

#include <gtest/gtest.h>

#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard::data {
namespace {

// Five samples of shape (2, 3): sample i holds 100 * i + j; target i is 10 + i.
Dataset MakeDataset() {
  std::vector<float> x;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 6; ++j) x.push_back(100.0f * i + j);
  }
  return Dataset(FromVector(x, Shape{5, 2, 3}), FromVector<int64_t>({10, 11, 12, 13, 14}));
}

std::vector<float> Row(int i) {
  std::vector<float> r;
  for (int j = 0; j < 6; ++j) r.push_back(100.0f * i + j);
  return r;
}

std::vector<float> Concat(std::initializer_list<int> rows) {
  std::vector<float> out;
  for (int i : rows) {
    std::vector<float> r = Row(i);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

TEST(DatasetTest, GetGathersTheRowsInIndexOrder) {
  Dataset ds = MakeDataset();
  EXPECT_EQ(ds.size(), 5);
  Batch b = ds.Get({3, 0, 3});
  EXPECT_EQ(b.input.shape(), Shape({3, 2, 3}));
  EXPECT_EQ(b.target.shape(), Shape({3}));
  EXPECT_EQ(ToVector<float>(b.input), Concat({3, 0, 3}));
  EXPECT_EQ(ToVector<int64_t>(b.target), (std::vector<int64_t>{13, 10, 13}));
}

TEST(DatasetTest, BatchesAreCopiesNotViews) {
  Dataset ds = MakeDataset();
  Batch b = ds.Get({1});
  b.input.data<float>()[0] = -1.0f;
  EXPECT_EQ(ToVector<float>(ds.Get({1}).input), Row(1));
}

TEST(DatasetTest, FetchMatchesGet) {
  Dataset ds = MakeDataset();
  StatusOr<Batch> b = ds.Fetch({4, 2});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ToVector<float>(b->input), Concat({4, 2}));
}

TEST(DatasetTest, SelectMakesASmallerDatasetInTheGivenOrder) {
  Dataset small = MakeDataset().Select({4, 1});
  EXPECT_EQ(small.size(), 2);
  EXPECT_EQ(ToVector<float>(small.inputs()), Concat({4, 1}));
  EXPECT_EQ(ToVector<int64_t>(small.targets()), (std::vector<int64_t>{14, 11}));
}

TEST(DatasetTest, NonContiguousInputsAreMadeContiguous) {
  // A (3, 2) transpose of a (2, 3) tensor: rows of the transpose are columns of the original.
  Tensor base = FromVector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor t = views::Transpose(base, 0, 1);
  ASSERT_FALSE(t.is_contiguous());
  Dataset ds(t, FromVector<int64_t>({0, 1, 2}));
  EXPECT_EQ(ToVector<float>(ds.Get({2, 0}).input), (std::vector<float>{3, 6, 1, 4}));
}

TEST(DatasetTest, SubsetMapsItsIndicesIntoTheBase) {
  auto base = std::make_shared<Dataset>(MakeDataset());
  Subset sub(base, {4, 2, 0});
  EXPECT_EQ(sub.size(), 3);
  StatusOr<Batch> b = sub.Fetch({1, 2});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ToVector<float>(b->input), Concat({2, 0}));
  EXPECT_EQ(ToVector<int64_t>(b->target), (std::vector<int64_t>{12, 10}));
}

TEST(DatasetDeathTest, AnIndexOutsideTheDatasetIsABug) {
  Dataset ds = MakeDataset();
  EXPECT_DEATH(ds.Get({5}), "outside \\[0, 5\\)");
}

}  // namespace
}  // namespace trainyard::data
