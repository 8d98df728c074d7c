#include "worker/data/vocabulary.h"

#include <gtest/gtest.h>

#include "tests/worker/data/data_test_util.h"

namespace trainyard::data {
namespace {

using testing::Has;
using testing::TempDir;

TEST(VocabularyTest, CharVocabularyIsTheSortedSetOfBytesSeen) {
  StatusOr<Vocabulary> v = Vocabulary::FromText("banana band\n");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->kind(), Vocabulary::Kind::kChar);
  ASSERT_EQ(v->size(), 6);  // '\n' ' ' a b d n
  const std::string expected = "\n abdn";
  for (int t = 0; t < 6; ++t) EXPECT_EQ(v->ByteOf(t), static_cast<unsigned char>(expected[t]));
}

TEST(VocabularyTest, EncodeAndDecodeRoundTrip) {
  const std::string text = "In the beginning God created the heaven and the earth.\n";
  StatusOr<Vocabulary> v = Vocabulary::FromText(text);
  ASSERT_TRUE(v.ok());
  StatusOr<std::vector<uint16_t>> tokens = v->Encode("the earth");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 9u);
  for (uint16_t t : *tokens) EXPECT_LT(t, v->size());
  EXPECT_EQ(*v->Decode(*tokens), "the earth");
  std::vector<int64_t> wide(tokens->begin(), tokens->end());
  EXPECT_EQ(*v->Decode(wide), "the earth");
}

TEST(VocabularyTest, ByteVocabularyEncodesEveryByteAsItsValue) {
  Vocabulary v = Vocabulary::Bytes();
  EXPECT_EQ(v.size(), 256);
  const std::string text("\x00\xff\xe2\x94\x80z", 6);  // includes a UTF-8 box-drawing char
  StatusOr<std::vector<uint16_t>> tokens = v.Encode(text);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, (std::vector<uint16_t>{0, 255, 0xe2, 0x94, 0x80, 'z'}));
  EXPECT_EQ(*v.Decode(*tokens), text);
}

TEST(VocabularyTest, UnknownBytesAndTokensAreErrorsNamingThePosition) {
  StatusOr<Vocabulary> v = Vocabulary::FromText("abc");
  ASSERT_TRUE(v.ok());
  StatusOr<std::vector<uint16_t>> e = v->Encode("abxc");
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(e.status().message(), "byte 120 at offset 2")) << e.status();
  StatusOr<std::string> d = v->Decode(std::vector<int64_t>{0, 3});
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(d.status().message(), "token 3 at position 1")) << d.status();
  EXPECT_FALSE(v->Decode(std::vector<int64_t>{-1}).ok());
  EXPECT_FALSE(Vocabulary::FromText("").ok());
}

TEST(VocabularyTest, SaveAndLoadRoundTripBothKinds) {
  TempDir dir;
  StatusOr<Vocabulary> chars = Vocabulary::FromText("hello, world\n");
  ASSERT_TRUE(chars.ok());
  ASSERT_TRUE(chars->Save(dir.File("chars.vocab")).ok());
  StatusOr<Vocabulary> back = Vocabulary::Load(dir.File("chars.vocab"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *chars);
  EXPECT_EQ(testing::ReadRaw(dir.File("chars.vocab")),
            "trainyard-vocabulary 1\nkind char\nsize 10\n10\n32\n44\n100\n101\n104\n108\n111\n"
            "114\n119\n");
  ASSERT_TRUE(Vocabulary::Bytes().Save(dir.File("bytes.vocab")).ok());
  StatusOr<Vocabulary> bytes = Vocabulary::Load(dir.File("bytes.vocab"));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(*bytes == Vocabulary::Bytes());
  EXPECT_FALSE(*bytes == *chars);
}

TEST(VocabularyTest, CorruptFilesAreErrorsNamingPathAndLine) {
  TempDir dir;
  struct Case {
    std::string text;
    std::string line;
  };
  const std::vector<Case> cases = {
      {"not a vocabulary\n", "line 1"},
      {"trainyard-vocabulary 1\nkind words\nsize 2\n", "line 2"},
      {"trainyard-vocabulary 1\nkind char\nsize x\n", "line 3"},
      {"trainyard-vocabulary 1\nkind char\nsize 2\n65\n65\n", "line 5"},
      {"trainyard-vocabulary 1\nkind char\nsize 2\n65\n300\n", "line 5"},
      {"trainyard-vocabulary 1\nkind char\nsize 3\n65\n66\n", "size line says 3"},
      {"trainyard-vocabulary 1\nkind byte\nsize 255\n", "line 3"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.File("bad.vocab");
    testing::WriteRaw(path, c.text);
    StatusOr<Vocabulary> v = Vocabulary::Load(path);
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(Has(v.status().message(), path) && Has(v.status().message(), c.line))
        << c.text << " -> " << v.status();
  }
  EXPECT_EQ(Vocabulary::Load(dir.File("missing.vocab")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard::data
