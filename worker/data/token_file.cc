#include "worker/data/token_file.h"

#include "worker/data/file_io.h"

namespace trainyard::data {
namespace {

constexpr char kMagic[6] = {'T', 'Y', 'T', 'O', 'K', '1'};
constexpr int64_t kMaxVocab = 65536;

void PutLittle(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLittle(const std::string& in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  }
  return v;
}

// Checks magic, version and vocabulary size; returns the token count from the header.
StatusOr<uint64_t> ReadHeader(const std::string& path, const std::string& bytes,
                              int64_t* vocab_size) {
  if (bytes.size() < static_cast<size_t>(kTokenFileHeaderBytes)) {
    return DataLossError(path + ": truncated: " + std::to_string(bytes.size()) +
                         " bytes, shorter than the " + std::to_string(kTokenFileHeaderBytes) +
                         "-byte token file header");
  }
  if (bytes.compare(0, sizeof(kMagic), kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgumentError(path + ": not a token file (it does not start with \"TYTOK1\")");
  }
  const uint64_t version = GetLittle(bytes, 6, 2);
  if (version != kTokenFileVersion) {
    return UnimplementedError(path + ": token file version " + std::to_string(version) +
                              " is not supported; this build reads version " +
                              std::to_string(kTokenFileVersion));
  }
  *vocab_size = static_cast<int64_t>(GetLittle(bytes, 8, 4));
  if (*vocab_size < 1 || *vocab_size > kMaxVocab) {
    return DataLossError(path + ": vocabulary size " + std::to_string(*vocab_size) +
                         " is outside [1, 65536]");
  }
  return GetLittle(bytes, 12, 8);
}

}  // namespace

Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens,
                      int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > kMaxVocab) {
    return InvalidArgumentError(path + ": vocabulary size " + std::to_string(vocab_size) +
                                " is outside [1, 65536]");
  }
  std::string out(kMagic, sizeof(kMagic));
  PutLittle(&out, kTokenFileVersion, 2);
  PutLittle(&out, static_cast<uint64_t>(vocab_size), 4);
  PutLittle(&out, tokens.size(), 8);
  out.reserve(out.size() + 2 * tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      return InvalidArgumentError(path + ": token " + std::to_string(tokens[i]) + " at position " +
                                  std::to_string(i) + " is outside the vocabulary of " +
                                  std::to_string(vocab_size));
    }
    PutLittle(&out, tokens[i], 2);
  }
  return WriteFileBytes(path, out);
}

StatusOr<TokenFile> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  TokenFile file;
  ASSIGN_OR_RETURN(uint64_t count, ReadHeader(path, bytes, &file.vocab_size));
  const uint64_t payload = bytes.size() - kTokenFileHeaderBytes;
  const bool truncated = count > payload / 2;  // written so that 2 * count cannot overflow
  if (truncated || payload != 2 * count) {
    const std::string expected = count > (UINT64_MAX - kTokenFileHeaderBytes) / 2
                                     ? std::string("more than 2^64")
                                     : std::to_string(kTokenFileHeaderBytes + 2 * count);
    return DataLossError(path + ": " + (truncated ? "truncated" : "has trailing bytes") +
                         ": the header says " + std::to_string(count) + " tokens (" + expected +
                         " bytes) but the file has " + std::to_string(bytes.size()) + " bytes");
  }
  file.tokens.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    file.tokens[i] = static_cast<uint16_t>(GetLittle(bytes, kTokenFileHeaderBytes + 2 * i, 2));
    if (file.tokens[i] >= file.vocab_size) {
      return DataLossError(path + ": token " + std::to_string(file.tokens[i]) + " at position " +
                           std::to_string(i) + " is outside the vocabulary of " +
                           std::to_string(file.vocab_size));
    }
  }
  return file;
}

}  // namespace trainyard::data
