// Vocabulary: maps text to token ids and back, one byte per token. Two kinds:
//   byte: all 256 byte values; token id = byte value. Encodes any text.
//   char: the sorted set of distinct bytes seen in a corpus; token id = rank in that set.
//         A "character" is a byte, so UTF-8 text round-trips exactly (a multi-byte character
//         is several tokens).
// Token ids are uint16 like the token files (worker/data/token_file.h).
//
// Note [Vocabulary file]: a small text file kept beside a checkpoint, lines ending in '\n':
//   trainyard-vocabulary 1        format name and version
//   kind char                     "byte" or "char"
//   size 3                        number of tokens
//   10                            char kind only: the byte value of token 0, 1, ... in
//   65                            increasing order, one decimal number per line
//   66
// A byte vocabulary has only the first three lines ("kind byte", "size 256").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trainyard::data {

class Vocabulary {
 public:
  enum class Kind { kByte, kChar };

  // The 256-token byte vocabulary.
  static Vocabulary Bytes();
  // The character vocabulary of `text`; InvalidArgument when `text` is empty.
  static StatusOr<Vocabulary> FromText(std::string_view text);
  // Reads a file written by Save; errors name the path and the line.
  static StatusOr<Vocabulary> Load(const std::string& path);
  Status Save(const std::string& path) const;

  Kind kind() const { return kind_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  // The byte of token `token` (in [0, size()); outside is a bug).
  unsigned char ByteOf(int64_t token) const;

  // InvalidArgument naming the offset when `text` holds a byte outside the vocabulary.
  StatusOr<std::vector<uint16_t>> Encode(std::string_view text) const;
  // InvalidArgument naming the position when a token is outside [0, size()).
  StatusOr<std::string> Decode(const std::vector<uint16_t>& tokens) const;
  StatusOr<std::string> Decode(const std::vector<int64_t>& tokens) const;

  friend bool operator==(const Vocabulary& a, const Vocabulary& b) {
    return a.kind_ == b.kind_ && a.bytes_ == b.bytes_;
  }

 private:
  Vocabulary(Kind kind, std::vector<unsigned char> bytes);
  template <typename T>
  StatusOr<std::string> DecodeImpl(const std::vector<T>& tokens) const;

  Kind kind_;
  std::vector<unsigned char> bytes_;     // token -> byte, increasing
  std::array<int16_t, 256> token_of_{};  // byte -> token, -1 when absent
};

}  // namespace trainyard::data
