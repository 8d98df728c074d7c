// Token files: a tokenised corpus stored once and memory-cheaply (2 bytes a token).
//
// Note [Token file format], all integers little-endian:
//   bytes 0..5    magic "TYTOK1"
//   bytes 6..7    uint16 format version (1)
//   bytes 8..11   uint32 vocabulary size V, in [1, 65536]
//   bytes 12..19  uint64 token count N
//   bytes 20..    N uint16 tokens, each < V
// The file is exactly 20 + 2N bytes; anything else is corruption. It may also be gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::data {

inline constexpr int64_t kTokenFileHeaderBytes = 20;
inline constexpr uint16_t kTokenFileVersion = 1;

struct TokenFile {
  int64_t vocab_size = 0;
  std::vector<uint16_t> tokens;
};

// InvalidArgument when vocab_size is outside [1, 65536] or a token is >= vocab_size.
Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens,
                      int64_t vocab_size);

// Validates everything in the note above; errors name the path and what is wrong (DataLoss for
// a truncated or corrupt file, Unimplemented for another version).
StatusOr<TokenFile> ReadTokenFile(const std::string& path);

}  // namespace trainyard::data
