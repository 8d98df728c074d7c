// BpeTokenizer: GPT-2's byte-level BPE, read from a Hugging Face tokenizer.json (the file
// `tokenizers` writes: model.type "BPE" with model.vocab and model.merges, pre_tokenizer
// ByteLevel). Encoding is the library's: the text is split as GPT-2's pattern splits it
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// each piece's bytes are mapped to GPT-2's printable characters (bytes_to_unicode), and the
// merges apply lowest rank first. Letters and numbers are ASCII's; other code points at or
// above U+0080 count as letters (the library's Unicode classes differ only for non-ASCII
// digits, punctuation and spaces). Special tokens (added_tokens) are not recognised in text.
//
//   ASSIGN_OR_RETURN(data::BpeTokenizer bpe, data::BpeTokenizer::Load("tokenizer.json"));
//   ASSIGN_OR_RETURN(std::vector<uint16_t> ids, bpe.Encode(text));
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainyard::data {

class BpeTokenizer {
 public:
  // InvalidArgument naming the path and the part of the file that is wrong (not byte-level
  // BPE, an id outside [0, 65536), a merge of tokens the vocabulary lacks).
  static StatusOr<BpeTokenizer> Load(const std::string& path);

  // Token ids (uint16, as token files hold them). InvalidArgument when a piece's symbol has no
  // id (a vocabulary without every byte). Each merge round scans its piece, so a piece of n
  // bytes (a word: text without spaces) costs O(n^2).
  StatusOr<std::vector<uint16_t>> Encode(std::string_view text) const;

  // One more than the largest id: the model's vocabulary size.
  int64_t vocab_size() const { return vocab_size_; }

 private:
  // Appends the ids of one pre-tokenised piece.
  Status EncodePiece(std::string_view piece, std::vector<uint16_t>* out) const;

  std::unordered_map<std::string, int64_t> vocab_;                // GPT-2 characters (UTF-8) -> id
  std::map<std::pair<std::string, std::string>, int64_t> ranks_;  // merge -> rank
  std::string byte_char_[256];  // byte -> its GPT-2 character, as UTF-8
  int64_t vocab_size_ = 0;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
};

// The pieces GPT-2's pattern splits `text` into (see above), for tests.
std::vector<std::string_view> SplitGpt2(std::string_view text);

}  // namespace trainyard::data
