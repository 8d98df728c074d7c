#include "worker/data/token_file.h"

#include <gtest/gtest.h>

#include "tests/worker/data/data_test_util.h"

namespace trainyard::data {
namespace {

using testing::Has;
using testing::ReadRaw;
using testing::TempDir;
using testing::WriteRaw;

TEST(TokenFileTest, RoundTripsTokensAndVocabularySize) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {0, 64999, 5, 5, 1234};
  ASSERT_TRUE(WriteTokenFile(dir.File("t.tok"), tokens, 65000).ok());
  StatusOr<TokenFile> f = ReadTokenFile(dir.File("t.tok"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->vocab_size, 65000);
  EXPECT_EQ(f->tokens, tokens);
}

TEST(TokenFileTest, TheLayoutIsTheDocumentedLittleEndianHeader) {
  TempDir dir;
  ASSERT_TRUE(WriteTokenFile(dir.File("t.tok"), {0x0102, 3}, 300).ok());
  const std::string expected(
      "TYTOK1\x01\x00\x2c\x01\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00"
      "\x02\x01\x03\x00",
      24);
  EXPECT_EQ(ReadRaw(dir.File("t.tok")), expected);
}

TEST(TokenFileTest, AnEmptyStreamRoundTrips) {
  TempDir dir;
  ASSERT_TRUE(WriteTokenFile(dir.File("e.tok"), {}, 1).ok());
  StatusOr<TokenFile> f = ReadTokenFile(dir.File("e.tok"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->tokens.empty());
}

TEST(TokenFileTest, TheWriterRejectsTokensOutsideTheVocabulary) {
  TempDir dir;
  Status s = WriteTokenFile(dir.File("t.tok"), {1, 7}, 7);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(s.message(), "token 7 at position 1")) << s;
  EXPECT_FALSE(WriteTokenFile(dir.File("t.tok"), {}, 0).ok());
  EXPECT_FALSE(WriteTokenFile(dir.File("t.tok"), {}, 65537).ok());
}

// Writes a valid file, applies `corrupt` to its bytes and returns the reader's error.
template <typename F>
Status ReadCorrupted(const TempDir& dir, F corrupt) {
  const std::string path = dir.File("c.tok");
  EXPECT_TRUE(WriteTokenFile(path, {1, 2, 3}, 10).ok());
  std::string bytes = ReadRaw(path);
  corrupt(&bytes);
  WriteRaw(path, bytes);
  StatusOr<TokenFile> f = ReadTokenFile(path);
  EXPECT_FALSE(f.ok());
  EXPECT_TRUE(Has(f.status().message(), path)) << f.status();
  return f.status();
}

TEST(TokenFileTest, CorruptionIsAnErrorNamingThePathAndTheProblem) {
  TempDir dir;
  Status s = ReadCorrupted(dir, [](std::string* b) { (*b)[0] = 'X'; });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(s.message(), "not a token file")) << s;
  s = ReadCorrupted(dir, [](std::string* b) { b->pop_back(); });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Has(s.message(), "truncated") && Has(s.message(), "3 tokens (26 bytes)") &&
              Has(s.message(), "25 bytes"))
      << s;
  s = ReadCorrupted(dir, [](std::string* b) { b->resize(9); });
  EXPECT_TRUE(Has(s.message(), "truncated") && Has(s.message(), "20-byte")) << s;
  s = ReadCorrupted(dir, [](std::string* b) { b->push_back('\0'); });
  EXPECT_TRUE(Has(s.message(), "trailing")) << s;
  s = ReadCorrupted(dir, [](std::string* b) { (*b)[22] = 10; });  // token 1 := 10
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Has(s.message(), "token 10 at position 1")) << s;
  s = ReadCorrupted(dir, [](std::string* b) { (*b)[6] = 2; });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Has(s.message(), "version 2")) << s;
  s = ReadCorrupted(dir, [](std::string* b) { (*b)[8] = 0; });  // vocabulary size 0
  EXPECT_TRUE(Has(s.message(), "vocabulary size 0")) << s;
  s = ReadCorrupted(dir, [](std::string* b) { (*b)[19] = '\x80'; });  // count near 2^64
  EXPECT_TRUE(Has(s.message(), "truncated")) << s;
}

TEST(TokenFileTest, AMissingFileIsNotFound) {
  TempDir dir;
  StatusOr<TokenFile> f = ReadTokenFile(dir.File("none.tok"));
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Has(f.status().message(), dir.File("none.tok")));
}

}  // namespace
}  // namespace trainyard::data
