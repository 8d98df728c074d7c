#include "worker/trainer/durable_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/worker/trainer/trainer_test_util.h"

namespace trainyard::trainer {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

TEST(DurableFileTest, WritesReplacesAndReadsBackBytes) {
  TempDir tmp;
  const std::string bytes("a\0b\nlonger text", 15);
  ASSERT_TRUE(WriteFileSynced(tmp.File("f"), "old contents that are longer").ok());
  ASSERT_TRUE(WriteFileSynced(tmp.File("f"), bytes).ok());
  StatusOr<std::string> read = ReadFileToString(tmp.File("f"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  EXPECT_TRUE(SyncDirectory(tmp.path()).ok());
}

TEST(DurableFileTest, ErrorsNameThePathWithTheCanonicalCode) {
  TempDir tmp;
  Status s = WriteFileSynced(tmp.File("no/such/dir/f"), "x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(tmp.File("no/such/dir/f")));
  StatusOr<std::string> read = ReadFileToString(tmp.File("absent"));
  EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(tmp.File("absent")));
  s = SyncDirectory(tmp.File("absent"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(tmp.File("absent")));
}

}  // namespace
}  // namespace trainyard::trainer
