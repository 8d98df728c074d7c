#include "worker/data/csv.h"

#include <gtest/gtest.h>

#include "tests/worker/data/data_test_util.h"

namespace trainyard::data {
namespace {

using testing::Has;

CsvOptions WithHeader() {
  CsvOptions o;
  o.header = true;
  return o;
}

TEST(CsvTest, ParsesFeaturesAndTheLastColumnAsLabel) {
  StatusOr<Dataset> ds = ParseCsv("a,b,label\n1,2.5,0\n-3, 4e1 ,2\r\n\n", "t.csv", WithHeader());
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->inputs().shape(), Shape({2, 2}));
  EXPECT_EQ(ds->inputs().dtype(), DType::kFloat32);
  EXPECT_EQ(ToVector<float>(ds->inputs()), (std::vector<float>{1, 2.5f, -3, 40}));
  EXPECT_EQ(ds->targets().dtype(), DType::kInt64);
  EXPECT_EQ(ToVector<int64_t>(ds->targets()), (std::vector<int64_t>{0, 2}));
}

TEST(CsvTest, TheLabelColumnCanBeAnyIndexAndIntegralFloatsAreLabels) {
  CsvOptions o;
  o.label_column = 0;
  StatusOr<Dataset> ds = ParseCsv("7.0,1,2\n3,4,5\n", "t.csv", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ToVector<float>(ds->inputs()), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(ToVector<int64_t>(ds->targets()), (std::vector<int64_t>{7, 3}));
  o.label_column = -2;
  ds = ParseCsv("7,1,2\n3,4,5\n", "t.csv", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ToVector<int64_t>(ds->targets()), (std::vector<int64_t>{1, 4}));
}

TEST(CsvTest, OnlyAnAnnouncedHeaderLineIsSkipped) {
  StatusOr<Dataset> ds = ParseCsv("1,2\n3,4\n", "t.csv");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 2);
  ds = ParseCsv("\nf,l\n1,2\n", "t.csv", WithHeader());  // the header follows a blank line
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 1);
}

TEST(CsvTest, ABadCellNamesTheFileLineColumnAndText) {
  StatusOr<Dataset> ds = ParseCsv("x,y,l\n1,2,0\n3,abc,1\n", "data.csv", WithHeader());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = ds.status().message();
  EXPECT_TRUE(Has(m, "data.csv: line 3, column 2") && Has(m, "\"abc\"")) << m;
  ds = ParseCsv("1,,0\n", "e.csv");
  EXPECT_TRUE(Has(ds.status().message(), "e.csv: line 1, column 2")) << ds.status();
  ds = ParseCsv("1,2,nan\n", "n.csv");
  EXPECT_TRUE(Has(ds.status().message(), "line 1, column 3")) << ds.status();
}

TEST(CsvTest, ARowOfTheWrongWidthNamesItsLine) {
  StatusOr<Dataset> ds = ParseCsv("1,2,0\n1,2\n", "r.csv");
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(ds.status().message(), "r.csv: line 2 has 2 columns")) << ds.status();
}

TEST(CsvTest, ANonIntegerClassLabelIsAnErrorButARegressionTargetIsNot) {
  StatusOr<Dataset> ds = ParseCsv("1,2,0\n1,2,0.5\n", "l.csv");
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(ds.status().message(), "l.csv: line 2, column 3")) << ds.status();
  CsvOptions o;
  o.target_dtype = DType::kFloat32;
  ds = ParseCsv("1,2,0\n1,2,0.5\n", "l.csv", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->targets().dtype(), DType::kFloat32);
  EXPECT_EQ(ToVector<float>(ds->targets()), (std::vector<float>{0, 0.5f}));
}

TEST(CsvTest, SpaceDelimiterSplitsOnRunsOfBlanks) {
  CsvOptions o;
  o.delimiter = ' ';
  o.target_dtype = DType::kFloat64;
  StatusOr<Dataset> ds = ParseCsv("  59  2 32.1\t151\n48 1 21.6 75  \n", "w.txt", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->inputs().shape(), Shape({2, 3}));
  EXPECT_EQ(ToVector<double>(ds->targets()), (std::vector<double>{151, 75}));
}

TEST(CsvTest, EmptyTablesAndLabelColumnsOutsideTheRowAreErrors) {
  EXPECT_EQ(ParseCsv("h\n", "h.csv", WithHeader()).status().code(), StatusCode::kInvalidArgument);
  CsvOptions o;
  o.label_column = 3;
  StatusOr<Dataset> ds = ParseCsv("1,2,3\n", "c.csv", o);
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(ds.status().message(), "label column 3")) << ds.status();
}

TEST(CsvTest, LoadCsvReadsGzipOrRawFilesAndNamesMissingOnes) {
  testing::TempDir dir;
  const std::string path = testing::WriteMaybeGzip(dir, "digits.csv", "0,16,3\n5,1,9\n");
  StatusOr<Dataset> ds = LoadCsv(path);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ToVector<int64_t>(ds->targets()), (std::vector<int64_t>{3, 9}));
  StatusOr<Dataset> missing = LoadCsv(dir.File("none.csv"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Has(missing.status().message(), dir.File("none.csv")));
}

}  // namespace
}  // namespace trainyard::data
