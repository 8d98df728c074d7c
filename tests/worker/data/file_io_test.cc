#include "worker/data/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "tests/worker/data/data_test_util.h"

namespace trainyard::data {
namespace {

using testing::Has;
using testing::TempDir;

TEST(FileIoTest, ReadsARawFileByteForByte) {
  TempDir dir;
  const std::string bytes("a\0b\xff\n", 5);
  testing::WriteRaw(dir.File("raw.bin"), bytes);
  StatusOr<std::string> got = ReadFileBytes(dir.File("raw.bin"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
}

TEST(FileIoTest, AMissingFileIsNotFoundNamingThePath) {
  TempDir dir;
  StatusOr<std::string> got = ReadFileBytes(dir.File("absent.gz"));
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Has(got.status().message(), dir.File("absent.gz"))) << got.status();
}

// /dev/zero would be read until memory ran out, a FIFO without a writer for ever.
TEST(FileIoTest, SpecialFilesAreRefusedNamingWhatTheyAre) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.File("fifo").c_str(), 0600), 0);
  const std::pair<std::string, std::string> cases[] = {{"/dev/zero", "a character device"},
                                                       {dir.File("fifo"), "a FIFO"},
                                                       {dir.path(), "a directory"}};
  for (const auto& [path, kind] : cases) {
    StatusOr<std::string> got = ReadFileBytes(path);
    EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << path;
    EXPECT_TRUE(Has(got.status().message(), path + " is " + kind + "; data must be a regular file"))
        << got.status();
  }
}

TEST(FileIoTest, WriteReplacesTheFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.File("out.txt");
  ASSERT_TRUE(WriteFileBytes(path, "first").ok());
  ASSERT_TRUE(WriteFileBytes(path, "second").ok());
  EXPECT_EQ(*ReadFileBytes(path), "second");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(FileIoTest, WritingIntoAMissingDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  Status s = WriteFileBytes(dir.File("no/such/dir/f.txt"), "x");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "no/such/dir/f.txt")) << s;
}

#ifdef TY_HAVE_ZLIB

TEST(FileIoTest, DecompressesGzipDetectedByContentNotName) {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes.push_back(static_cast<char>(i * 7 % 251));
  testing::WriteGzip(dir.File("data.bin"), bytes);  // no .gz suffix on purpose
  StatusOr<std::string> got = ReadFileBytes(dir.File("data.bin"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
}

TEST(FileIoTest, TruncatedGzipIsDataLossNamingThePath) {
  TempDir dir;
  std::string bytes(50000, 'x');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 256);
  testing::WriteGzip(dir.File("full.gz"), bytes);
  const std::string gz = testing::ReadRaw(dir.File("full.gz"));
  ASSERT_GT(gz.size(), 100u);
  testing::WriteRaw(dir.File("cut.gz"), gz.substr(0, gz.size() / 2));
  StatusOr<std::string> got = ReadFileBytes(dir.File("cut.gz"));
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Has(got.status().message(), dir.File("cut.gz"))) << got.status();
  EXPECT_TRUE(Has(got.status().message(), "truncated")) << got.status();
}

TEST(FileIoTest, CorruptGzipIsDataLossNamingThePath) {
  TempDir dir;
  testing::WriteGzip(dir.File("ok.gz"), std::string(10000, 'q') + "tail");
  std::string gz = testing::ReadRaw(dir.File("ok.gz"));
  for (size_t i = 10; i < gz.size() - 8; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  testing::WriteRaw(dir.File("bad.gz"), gz);
  StatusOr<std::string> got = ReadFileBytes(dir.File("bad.gz"));
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Has(got.status().message(), dir.File("bad.gz"))) << got.status();
}

#else

TEST(FileIoTest, GzipWithoutZlibIsAClearError) {
  TempDir dir;
  testing::WriteRaw(dir.File("x.gz"), std::string("\x1f\x8b\x08\x00", 4));
  StatusOr<std::string> got = ReadFileBytes(dir.File("x.gz"));
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(got.status().message(), "this build has no zlib")) << got.status();
  EXPECT_TRUE(Has(got.status().message(), dir.File("x.gz"))) << got.status();
}

#endif

}  // namespace
}  // namespace trainyard::data
