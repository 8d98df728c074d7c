#include "common/durable_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/testing/temp_dir.h"

namespace trainyard {
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

// The whole new contents or the old, never a part: written beside the file under another name
// and renamed over it; nothing is left behind, also when the write fails.
TEST(DurableFileTest, WriteFileAtomicallyReplacesTheFileWhole) {
  TempDir tmp;
  ASSERT_TRUE(WriteFileAtomically(tmp.File("f"), "first").ok());
  ASSERT_TRUE(WriteFileAtomically(tmp.File("f"), "second, longer").ok());
  EXPECT_EQ(*ReadFileToString(tmp.File("f")), "second, longer");
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    entries += !e.path().empty();
  EXPECT_EQ(entries, 1u) << "a temporary file was left";
  Status s = WriteFileAtomically(tmp.File("no/dir/f"), "x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(tmp.File("no/dir/f")));
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
}  // namespace trainyard
