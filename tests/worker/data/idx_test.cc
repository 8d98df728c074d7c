#include "worker/data/idx.h"

#include <gtest/gtest.h>

#include "tests/worker/data/data_test_util.h"

namespace trainyard::data {
namespace {

using testing::Has;
using testing::IdxImages;
using testing::IdxLabels;
using testing::TempDir;
using testing::WriteMaybeGzip;
using testing::WriteRaw;

// Three 2x3 images with pixel p of image i equal to 40 * i + p, and labels 7, 0, 9.
std::vector<uint8_t> Pixels() {
  std::vector<uint8_t> px;
  for (int i = 0; i < 3; ++i) {
    for (int p = 0; p < 6; ++p) px.push_back(static_cast<uint8_t>(40 * i + p));
  }
  return px;
}

IdxOptions Unnormalised() {
  IdxOptions o;
  o.normalize = false;
  return o;
}

struct Files {
  std::string images;
  std::string labels;
};

Files WriteFixture(const TempDir& dir) {
  return {WriteMaybeGzip(dir, "images", IdxImages(3, 2, 3, Pixels())),
          WriteMaybeGzip(dir, "labels", IdxLabels({7, 0, 9}))};
}

TEST(IdxTest, LoadsImagesAsFloatNchwAndLabelsAsInt64) {
  TempDir dir;
  Files f = WriteFixture(dir);
  StatusOr<Dataset> ds = LoadIdx(f.images, f.labels, Unnormalised());
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->inputs().shape(), Shape({3, 1, 2, 3}));
  EXPECT_EQ(ds->inputs().dtype(), DType::kFloat32);
  EXPECT_EQ(ds->targets().dtype(), DType::kInt64);
  EXPECT_EQ(ToVector<int64_t>(ds->targets()), (std::vector<int64_t>{7, 0, 9}));
  std::vector<float> x = ToVector<float>(ds->inputs());
  const std::vector<uint8_t> px = Pixels();
  for (size_t i = 0; i < px.size(); ++i) EXPECT_FLOAT_EQ(x[i], px[i] / 255.0f) << i;
}

TEST(IdxTest, NormalisesWithMeanAndStd) {
  TempDir dir;
  std::vector<uint8_t> px = {0, 255, 51, 128};
  const std::string images = WriteMaybeGzip(dir, "i", IdxImages(1, 2, 2, px));
  const std::string labels = WriteMaybeGzip(dir, "l", IdxLabels({3}));
  StatusOr<Dataset> ds = LoadIdx(images, labels);  // Fashion-MNIST defaults
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<float> x = ToVector<float>(ds->inputs());
  EXPECT_NEAR(x[0], (0.0 - 0.2860) / 0.3530, 1e-5);
  EXPECT_NEAR(x[1], (1.0 - 0.2860) / 0.3530, 1e-5);
  EXPECT_NEAR(x[2], (0.2 - 0.2860) / 0.3530, 1e-5);
  IdxOptions options;
  options.mean = 0.5f;
  options.std = 0.25f;
  StatusOr<Dataset> custom = LoadIdx(images, labels, options);
  ASSERT_TRUE(custom.ok()) << custom.status();
  EXPECT_NEAR(ToVector<float>(custom->inputs())[1], 2.0, 1e-5);
}

TEST(IdxTest, ReadsUncompressedFilesToo) {
  TempDir dir;
  WriteRaw(dir.File("i.idx"), IdxImages(3, 2, 3, Pixels()));
  WriteRaw(dir.File("l.idx"), IdxLabels({7, 0, 9}));
  StatusOr<Dataset> ds = LoadIdx(dir.File("i.idx"), dir.File("l.idx"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 3);
}

TEST(IdxTest, AMissingFileIsNotFoundNamingIt) {
  TempDir dir;
  Files f = WriteFixture(dir);
  StatusOr<Dataset> ds = LoadIdx(f.images, dir.File("nope.gz"));
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Has(ds.status().message(), dir.File("nope.gz"))) << ds.status();
}

TEST(IdxTest, BadMagicNamesThePathAndBothNumbers) {
  TempDir dir;
  Files f = WriteFixture(dir);
  // A labels file where an images file belongs.
  StatusOr<Dataset> ds = LoadIdx(f.labels, f.labels);
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = ds.status().message();
  EXPECT_TRUE(Has(m, f.labels) && Has(m, "0x00000801") && Has(m, "0x00000803")) << m;
  ds = LoadIdx(f.images, f.images);
  EXPECT_TRUE(Has(ds.status().message(), "0x00000801")) << ds.status();
}

TEST(IdxTest, TruncatedImagesNameThePathAndExpectedAndActualBytes) {
  TempDir dir;
  std::string images = IdxImages(3, 2, 3, Pixels());
  images.resize(images.size() - 5);
  const std::string path = WriteMaybeGzip(dir, "short", images);
  const std::string labels = WriteMaybeGzip(dir, "l", IdxLabels({7, 0, 9}));
  StatusOr<Dataset> ds = LoadIdx(path, labels);
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  const std::string& m = ds.status().message();
  EXPECT_TRUE(Has(m, path) && Has(m, "truncated") && Has(m, "34") && Has(m, "29")) << m;
}

TEST(IdxTest, TruncatedHeaderAndTruncatedLabelsAreErrorsNamingThePath) {
  TempDir dir;
  Files f = WriteFixture(dir);
  const std::string header = WriteMaybeGzip(dir, "hdr", IdxImages(3, 2, 3, {}).substr(0, 10));
  StatusOr<Dataset> ds = LoadIdx(header, f.labels);
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Has(ds.status().message(), header)) << ds.status();
  std::string labels = IdxLabels({7, 0, 9});
  labels.pop_back();
  const std::string short_labels = WriteMaybeGzip(dir, "short_labels", labels);
  ds = LoadIdx(f.images, short_labels);
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Has(ds.status().message(), short_labels) && Has(ds.status().message(), "11"))
      << ds.status();
}

TEST(IdxTest, TrailingBytesAreAnError) {
  TempDir dir;
  Files f = WriteFixture(dir);
  const std::string long_labels = WriteMaybeGzip(dir, "long", IdxLabels({7, 0, 9}) + "x");
  StatusOr<Dataset> ds = LoadIdx(f.images, long_labels);
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Has(ds.status().message(), "trailing")) << ds.status();
}

TEST(IdxTest, ImageAndLabelCountMismatchNamesBothFiles) {
  TempDir dir;
  Files f = WriteFixture(dir);
  const std::string two = WriteMaybeGzip(dir, "two", IdxLabels({1, 2}));
  StatusOr<Dataset> ds = LoadIdx(f.images, two);
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = ds.status().message();
  EXPECT_TRUE(Has(m, f.images) && Has(m, two) && Has(m, "3 images") && Has(m, "2 labels")) << m;
}

TEST(IdxTest, AZeroDimensionIsRejected) {
  TempDir dir;
  Files f = WriteFixture(dir);
  const std::string empty = WriteMaybeGzip(dir, "empty", IdxImages(3, 0, 3, {}));
  StatusOr<Dataset> ds = LoadIdx(empty, f.labels);
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(ds.status().message(), empty)) << ds.status();
}

TEST(IdxTest, FashionMnistPathsFollowTheDebianLayout) {
  StatusOr<IdxPaths> train = FashionMnistPaths("train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  EXPECT_EQ(train->labels, "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz");
  StatusOr<IdxPaths> test = FashionMnistPaths("test", "/d");
  ASSERT_TRUE(test.ok());
  EXPECT_EQ(test->images, "/d/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(test->labels, "/d/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(FashionMnistPaths("valid").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::data
