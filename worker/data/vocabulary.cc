#include "worker/data/vocabulary.h"

#include <cstdlib>
#include <sstream>

#include "worker/data/file_io.h"

namespace trainyard::data {
namespace {

constexpr const char* kHeader = "trainyard-vocabulary 1";

// Splits `text` at '\n'; a final '\n' does not start another (empty) line.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    lines.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return lines;
}

// A decimal integer in [lo, hi] filling all of `s`.
bool ParseInt(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::strtoll(s.c_str(), nullptr, 10);
  return *out >= lo && *out <= hi;
}

}  // namespace

Vocabulary::Vocabulary(Kind kind, std::vector<unsigned char> bytes)
    : kind_(kind), bytes_(std::move(bytes)) {
  token_of_.fill(-1);
  for (size_t t = 0; t < bytes_.size(); ++t) {
    TY_CHECK(t == 0 || bytes_[t] > bytes_[t - 1]) << "vocabulary bytes must increase";
    token_of_[bytes_[t]] = static_cast<int16_t>(t);
  }
}

Vocabulary Vocabulary::Bytes() {
  std::vector<unsigned char> all(256);
  for (int b = 0; b < 256; ++b) all[b] = static_cast<unsigned char>(b);
  return Vocabulary(Kind::kByte, std::move(all));
}

StatusOr<Vocabulary> Vocabulary::FromText(std::string_view text) {
  if (text.empty()) {
    return InvalidArgumentError("cannot build a character vocabulary from empty text");
  }
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::vector<unsigned char> bytes;
  for (int b = 0; b < 256; ++b) {
    if (seen[b]) bytes.push_back(static_cast<unsigned char>(b));
  }
  return Vocabulary(Kind::kChar, std::move(bytes));
}

unsigned char Vocabulary::ByteOf(int64_t token) const {
  TY_CHECK(token >= 0 && token < size()) << "token " << token << " outside [0, " << size() << ")";
  return bytes_[token];
}

StatusOr<std::vector<uint16_t>> Vocabulary::Encode(std::string_view text) const {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t t = token_of_[static_cast<unsigned char>(text[i])];
    if (t < 0) {
      return InvalidArgumentError("byte " + std::to_string(static_cast<unsigned char>(text[i])) +
                                  " at offset " + std::to_string(i) +
                                  " is not in the vocabulary of " + std::to_string(size()) +
                                  " characters");
    }
    tokens[i] = static_cast<uint16_t>(t);
  }
  return tokens;
}

template <typename T>
StatusOr<std::string> Vocabulary::DecodeImpl(const std::vector<T>& tokens) const {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = static_cast<int64_t>(tokens[i]);
    if (t < 0 || t >= size()) {
      return InvalidArgumentError("token " + std::to_string(t) + " at position " +
                                  std::to_string(i) + " is outside the vocabulary of " +
                                  std::to_string(size()));
    }
    text[i] = static_cast<char>(bytes_[t]);
  }
  return text;
}

StatusOr<std::string> Vocabulary::Decode(const std::vector<uint16_t>& tokens) const {
  return DecodeImpl(tokens);
}
StatusOr<std::string> Vocabulary::Decode(const std::vector<int64_t>& tokens) const {
  return DecodeImpl(tokens);
}

Status Vocabulary::Save(const std::string& path) const {
  std::ostringstream out;
  out << kHeader << "\nkind " << (kind_ == Kind::kByte ? "byte" : "char") << "\nsize " << size()
      << "\n";
  if (kind_ == Kind::kChar) {
    for (unsigned char b : bytes_) out << static_cast<int>(b) << "\n";
  }
  return WriteFileBytes(path, out.str());
}

StatusOr<Vocabulary> Vocabulary::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path));
  const std::vector<std::string> lines = Lines(text);
  auto bad = [&](size_t line, const std::string& what) {
    return InvalidArgumentError(path + ": line " + std::to_string(line) + ": " + what);
  };
  if (lines.empty() || lines[0] != kHeader) {
    return bad(1, "expected \"" + std::string(kHeader) + "\"; not a trainyard vocabulary file");
  }
  if (lines.size() < 3 || (lines[1] != "kind byte" && lines[1] != "kind char")) {
    return bad(2, "expected \"kind byte\" or \"kind char\"");
  }
  const Kind kind = lines[1] == "kind byte" ? Kind::kByte : Kind::kChar;
  int64_t size = 0;
  if (lines[2].rfind("size ", 0) != 0 || !ParseInt(lines[2].substr(5), 1, 256, &size) ||
      (kind == Kind::kByte && size != 256)) {
    return bad(3, "expected \"size N\" with N in [1, 256] (256 for a byte vocabulary)");
  }
  if (kind == Kind::kByte) {
    if (lines.size() != 3) return bad(4, "a byte vocabulary has no lines after its size");
    return Bytes();
  }
  if (static_cast<int64_t>(lines.size()) != 3 + size) {
    return bad(lines.size(), "the file has " + std::to_string(lines.size() - 3) +
                                 " byte lines but its size line says " + std::to_string(size));
  }
  std::vector<unsigned char> bytes;
  for (int64_t t = 0; t < size; ++t) {
    int64_t b = 0;
    if (!ParseInt(lines[3 + t], 0, 255, &b) || (t > 0 && b <= bytes.back())) {
      return bad(4 + t, "expected a byte value in [0, 255] greater than the line before, got \"" +
                            lines[3 + t] + "\"");
    }
    bytes.push_back(static_cast<unsigned char>(b));
  }
  return Vocabulary(Kind::kChar, std::move(bytes));
}

}  // namespace trainyard::data
