// BpeTokenizer against the tokenizers library: tests/golden/bpe_tokenizer.json (a byte-level
// BPE trained on the King James Bible) encodes tests/golden/bpe_sample.txt to the library's ids
// (tests/golden/make_hf_golden.py).
#include "worker/data/bpe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/golden.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/file_io.h"

namespace trainyard::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BpeTest, EncodesAsTheTokenizersLibraryDoes) {
  StatusOr<BpeTokenizer> bpe =
      BpeTokenizer::Load(trainyard::testing::GoldenPath("bpe_tokenizer.json"));
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_EQ(bpe->vocab_size(), 600);
  StatusOr<std::string> sample = ReadFileBytes(trainyard::testing::GoldenPath("bpe_sample.txt"));
  ASSERT_TRUE(sample.ok()) << sample.status();
  StatusOr<std::vector<uint16_t>> ids = bpe->Encode(*sample);
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::vector<trainyard::testing::GoldenCase> cases =
      trainyard::testing::ReadGolden(trainyard::testing::GoldenPath("hf.txt"));
  const trainyard::testing::GoldenCase* golden = nullptr;
  for (const auto& c : cases)
    if (c.name == "bpe") golden = &c;
  ASSERT_NE(golden, nullptr);
  const std::vector<int64_t> want = ToVector<int64_t>(golden->at("ids"));
  EXPECT_EQ(std::vector<int64_t>(ids->begin(), ids->end()), want);
}

TEST(BpeTest, SplitsAsGpt2sPattern) {
  std::vector<std::string> pieces;
  for (std::string_view p : SplitGpt2("I'd say  it's 42!?\n\n  Go ok  ")) pieces.emplace_back(p);
  EXPECT_THAT(pieces, ElementsAre("I", "'d", " say", " ", " it", "'s", " 42", "!?", "\n\n ", " Go",
                                  " ok", "  "));
}

TEST(BpeTest, AFileThatIsNotByteLevelBpeIsNamed) {
  trainyard::testing::TempDir dir;
  const std::string path = dir.path() + "/tokenizer.json";
  std::ofstream(path) << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  StatusOr<BpeTokenizer> bpe = BpeTokenizer::Load(path);
  ASSERT_FALSE(bpe.ok());
  EXPECT_EQ(bpe.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bpe.status().message(), HasSubstr(path + ": model.type is not \"BPE\""));
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 70000}, "merges": []},
                            "pre_tokenizer": {"type": "ByteLevel"}})";
  bpe = BpeTokenizer::Load(path);
  ASSERT_FALSE(bpe.ok());
  EXPECT_THAT(bpe.status().message(), HasSubstr("model.vocab[\"a\"] = 70000"));
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
                            "merges": ["a b"]}, "pre_tokenizer": {"type": "ByteLevel"}})";
  bpe = BpeTokenizer::Load(path);
  ASSERT_FALSE(bpe.ok());
  EXPECT_THAT(bpe.status().message(),
              HasSubstr("model.merges[0] = \"a b\" merges tokens that model.vocab lacks"));
  EXPECT_FALSE(BpeTokenizer::Load(dir.path() + "/missing.json").ok());
}

}  // namespace
}  // namespace trainyard::data
