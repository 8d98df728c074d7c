#include "common/json.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <unordered_set>

namespace trainyard {
namespace {

constexpr int kMaxDepth = 512;

const char* TypeName(Json::Type t) {
  static constexpr const char* kNames[] = {"null", "bool", "number", "string", "array", "object"};
  return kNames[static_cast<int>(t)];
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when the bytes there are not one
// (overlong forms, encoded surrogates and code points above U+10FFFF are invalid).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((c & 0xe0) == 0xc0) {
    n = 2, cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) return out->push_back(static_cast<char>(cp));
  const int n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  static constexpr unsigned kLead[] = {0, 0, 0xc0, 0xe0, 0xf0};
  out->push_back(static_cast<char>(kLead[n] | (cp >> (6 * (n - 1)))));
  for (int k = n - 2; k >= 0; --k) {
    out->push_back(static_cast<char>(0x80 | ((cp >> (6 * k)) & 0x3f)));
  }
}

void AppendEscaped(std::string_view s, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    static constexpr std::string_view kSpecial = "\"\\\b\f\n\r\t", kLetter = "\"\\bfnrt";
    if (const size_t k = kSpecial.find(static_cast<char>(c)); k != std::string_view::npos) {
      out->push_back('\\');
      out->push_back(kLetter[k]);
      ++i;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out->append(buf);
      ++i;
    } else {
      const size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(s.substr(i, n));
        i += n;
      }
    }
  }
  out->push_back('"');
}

void AppendDouble(double d, std::string* out) {
  if (!std::isfinite(d)) {
    out->append("null");
    return;
  }
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), d);  // shortest round trip
  const std::string_view text(buf, r.ptr - buf);
  out->append(text);
  if (text.find_first_of(".eE") == std::string_view::npos) out->append(".0");
}

std::string Quoted(std::string_view s) {
  std::string out;
  AppendEscaped(s, &out);
  return out;
}

// "field \"a.b\"", or "value" for the empty path (the value Get was called on).
std::string FieldName(std::string_view path) {
  return path.empty() ? "value" : "field \"" + std::string(path) + "\"";
}

// A short description of a value for error messages: string "fast", number 3, array of 2 items.
std::string Describe(const Json& v) {
  switch (v.type()) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kBool:
      return v.bool_value() ? "bool true" : "bool false";
    case Json::Type::kNumber:
      return "number " + v.Dump();
    case Json::Type::kString: {
      const std::string& s = v.string_value();
      if (s.size() <= 40) return "string " + Quoted(s);
      size_t cut = 37;
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
      return "string " + Quoted(s.substr(0, cut) + "...");
    }
    case Json::Type::kArray:
      return "array of " + std::to_string(v.size()) + " items";
    case Json::Type::kObject:
      return "object with " + std::to_string(v.size()) + " members";
  }
  return "unknown";
}

}  // namespace

Json Json::Array(Items items) {
  Json j;
  j.value_ = std::move(items);
  return j;
}

Json Json::Object(Members members) {
  std::unordered_set<std::string_view> seen;
  for (const Member& m : members) {
    TY_CHECK(seen.insert(m.first).second) << "Json::Object: key " << Quoted(m.first) << " twice";
  }
  Json j;
  j.value_ = std::move(members);
  return j;
}

Json::Type Json::type() const {
  // Indexed like the alternatives of value_: null, bool, double, int64_t, string, items, members.
  static constexpr Type kTypes[] = {Type::kNull,   Type::kBool,  Type::kNumber, Type::kNumber,
                                    Type::kString, Type::kArray, Type::kObject};
  return kTypes[value_.index()];
}

bool Json::bool_value() const {
  TY_CHECK(is_bool()) << "bool_value() of a " << TypeName(type());
  return std::get<bool>(value_);
}

double Json::number_value() const {
  TY_CHECK(is_number()) << "number_value() of a " << TypeName(type());
  if (is_integer()) return static_cast<double>(std::get<int64_t>(value_));
  return std::get<double>(value_);
}

int64_t Json::int_value() const {
  TY_CHECK(is_integer()) << "int_value() of " << Describe(*this) << ", not an exact integer";
  return std::get<int64_t>(value_);
}

const std::string& Json::string_value() const {
  TY_CHECK(is_string()) << "string_value() of a " << TypeName(type());
  return std::get<std::string>(value_);
}

const Json::Items& Json::items() const {
  TY_CHECK(is_array()) << "items() of a " << TypeName(type());
  return std::get<Items>(value_);
}

const Json::Members& Json::members() const {
  TY_CHECK(is_object()) << "members() of a " << TypeName(type());
  return std::get<Members>(value_);
}

size_t Json::size() const {
  TY_CHECK(is_array() || is_object()) << "size() of a " << TypeName(type());
  return is_array() ? items().size() : members().size();
}

const Json* Json::Find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const Member& m : std::get<Members>(value_)) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

Json* Json::Find(std::string_view key) {
  return const_cast<Json*>(static_cast<const Json*>(this)->Find(key));
}

Json& Json::Set(std::string key, Json value) {
  if (is_null()) value_ = Members();
  TY_CHECK(is_object()) << "Set(" << Quoted(key) << ") on a " << TypeName(type());
  if (Json* existing = Find(key)) {
    *existing = std::move(value);
  } else {
    std::get<Members>(value_).emplace_back(std::move(key), std::move(value));
  }
  return *this;
}

Json& Json::Append(Json value) {
  if (is_null()) value_ = Items();
  TY_CHECK(is_array()) << "Append() on a " << TypeName(type());
  std::get<Items>(value_).push_back(std::move(value));
  return *this;
}

bool operator==(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.int_value() == b.int_value();
    return a.number_value() == b.number_value();
  }
  return a.value_ == b.value_;
}

// ---- Dump ----

std::string Json::Dump(int indent) const {
  std::string out;
  DumpTo(&out, indent, 0);
  return out;
}

void Json::DumpTo(std::string* out, int indent, int depth) const {
  const auto newline = [&](int d) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(d) * indent, ' ');
  };
  switch (type()) {
    case Type::kNull:
      out->append("null");
      return;
    case Type::kBool:
      out->append(bool_value() ? "true" : "false");
      return;
    case Type::kNumber:
      if (is_integer()) {
        out->append(std::to_string(int_value()));
      } else {
        AppendDouble(std::get<double>(value_), out);
      }
      return;
    case Type::kString:
      AppendEscaped(string_value(), out);
      return;
    case Type::kArray:
    case Type::kObject:
      break;
  }
  const bool array = is_array();
  out->push_back(array ? '[' : '{');
  for (size_t i = 0; i < size(); ++i) {
    if (i > 0) out->push_back(',');
    newline(depth + 1);
    if (array) {
      items()[i].DumpTo(out, indent, depth + 1);
    } else {
      AppendEscaped(members()[i].first, out);
      out->append(indent >= 0 ? ": " : ":");
      members()[i].second.DumpTo(out, indent, depth + 1);
    }
  }
  if (size() > 0) newline(depth);
  out->push_back(array ? ']' : '}');
}

// ---- Parse ----

namespace {

// A recursive-descent parser over one text; positions are byte offsets into it.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  StatusOr<Json> ParseDocument() {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    ASSIGN_OR_RETURN(Json value, ParseValue(0));
    SkipWhitespace();
    if (!AtEnd()) return Error(pos_, "unexpected " + DescribeNext() + " after the value");
    return value;
  }

 private:
  StatusOr<Json> ParseValue(int depth);
  StatusOr<Json> ParseObject(int depth);
  StatusOr<Json> ParseArray(int depth);
  StatusOr<std::string> ParseString();
  Status ParseEscape(std::string* out);
  StatusOr<uint32_t> ParseHexQuad(size_t escape_at);
  StatusOr<Json> ParseNumber();
  StatusOr<Json> ParseLiteral();

  bool AtEnd() const { return pos_ >= text_.size(); }
  bool AtDigit() const { return !AtEnd() && text_[pos_] >= '0' && text_[pos_] <= '9'; }
  void SkipWhitespace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                        text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  // Skips `c` (and whitespace before it) when it comes next.
  bool Consume(char c) {
    SkipWhitespace();
    if (AtEnd() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  std::string DescribeNext() const;
  Status Error(size_t at, const std::string& what) const;

  std::string_view text_;
  size_t pos_ = 0;
};

std::string Parser::DescribeNext() const {
  if (AtEnd()) return "end of input";
  const unsigned char c = text_[pos_];
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  const size_t n = c >= 0x80 ? Utf8SequenceLength(text_, pos_) : 0;
  if (n > 0) return "'" + std::string(text_.substr(pos_, n)) + "'";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "byte 0x%02x", c);
  return buf;
}

Status Parser::Error(size_t at, const std::string& what) const {
  int64_t line = 1, column = 1;
  for (size_t i = 0; i < at && i < text_.size(); ++i) {
    const unsigned char c = text_[i];
    if (c == '\n') {
      ++line, column = 1;
    } else if ((c & 0xc0) != 0x80) {
      ++column;
    }
  }
  return InvalidArgumentError("invalid json at line " + std::to_string(line) + ", column " +
                              std::to_string(column) + ": " + what);
}

StatusOr<Json> Parser::ParseValue(int depth) {
  if (depth > kMaxDepth) {
    return Error(pos_, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  SkipWhitespace();
  if (AtEnd()) return Error(pos_, "expected a value, got end of input");
  const char c = text_[pos_];
  if (c == '{') return ParseObject(depth);
  if (c == '[') return ParseArray(depth);
  if (c == '"') {
    ASSIGN_OR_RETURN(std::string s, ParseString());
    return Json(std::move(s));
  }
  if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
  if (c == 't' || c == 'f' || c == 'n') return ParseLiteral();
  return Error(pos_, "expected a value, got " + DescribeNext());
}

StatusOr<Json> Parser::ParseObject(int depth) {
  ++pos_;  // '{'
  Json::Members members;
  std::unordered_set<std::string> seen;
  if (Consume('}')) return Json::Object(std::move(members));
  while (true) {
    SkipWhitespace();
    const size_t key_at = pos_;
    if (AtEnd() || text_[pos_] != '"') {
      return Error(pos_, "expected a string key, got " + DescribeNext());
    }
    ASSIGN_OR_RETURN(std::string key, ParseString());
    if (!seen.insert(key).second) return Error(key_at, "duplicate key " + Quoted(key));
    if (!Consume(':')) {
      return Error(pos_, "expected ':' after key " + Quoted(key) + ", got " + DescribeNext());
    }
    ASSIGN_OR_RETURN(Json value, ParseValue(depth + 1));
    members.emplace_back(std::move(key), std::move(value));
    if (Consume('}')) return Json::Object(std::move(members));
    if (!Consume(',')) {
      return Error(pos_, "expected ',' or '}' after an object member, got " + DescribeNext());
    }
  }
}

StatusOr<Json> Parser::ParseArray(int depth) {
  ++pos_;  // '['
  Json::Items items;
  if (Consume(']')) return Json::Array(std::move(items));
  while (true) {
    ASSIGN_OR_RETURN(Json value, ParseValue(depth + 1));
    items.push_back(std::move(value));
    if (Consume(']')) return Json::Array(std::move(items));
    if (!Consume(',')) {
      return Error(pos_, "expected ',' or ']' after an array item, got " + DescribeNext());
    }
  }
}

StatusOr<std::string> Parser::ParseString() {
  const size_t start = pos_++;  // '"'
  std::string out;
  while (true) {
    if (AtEnd()) return Error(start, "string is not closed before the end of input");
    const unsigned char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      return out;
    }
    if (c == '\\') {
      RETURN_IF_ERROR(ParseEscape(&out));
    } else if (c < 0x20) {
      return Error(pos_, "raw control character " + DescribeNext() +
                             " in a string; write it as an escape such as \\n or \\u001f");
    } else {
      const size_t n = Utf8SequenceLength(text_, pos_);
      if (n == 0) return Error(pos_, "invalid UTF-8 " + DescribeNext() + " in a string");
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }
}

Status Parser::ParseEscape(std::string* out) {
  const size_t at = pos_++;  // '\\'
  if (AtEnd()) return Error(at, "string is not closed before the end of input");
  const char c = text_[pos_++];
  static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
  if (const size_t k = kFrom.find(c); k != std::string_view::npos) {
    out->push_back(kTo[k]);
    return OkStatus();
  }
  if (c != 'u') {
    --pos_;
    return Error(at, "invalid escape in a string: backslash followed by " + DescribeNext());
  }
  ASSIGN_OR_RETURN(uint32_t cp, ParseHexQuad(at));
  if (cp >= 0xdc00 && cp <= 0xdfff) return Error(at, "lone low surrogate in a \\u escape");
  if (cp >= 0xd800 && cp <= 0xdbff) {
    const char* lone_high = "high surrogate \\u escape not followed by a low surrogate \\u escape";
    if (text_.substr(pos_, 2) != "\\u") return Error(at, lone_high);
    pos_ += 2;
    ASSIGN_OR_RETURN(uint32_t low, ParseHexQuad(at));
    if (low < 0xdc00 || low > 0xdfff) return Error(at, lone_high);
    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
  }
  AppendUtf8(cp, out);
  return OkStatus();
}

StatusOr<uint32_t> Parser::ParseHexQuad(size_t escape_at) {
  uint32_t cp = 0;
  for (int k = 0; k < 4; ++k, ++pos_) {
    const char h = AtEnd() ? '\0' : text_[pos_];
    int digit = -1;
    if (h >= '0' && h <= '9') digit = h - '0';
    if (h >= 'a' && h <= 'f') digit = h - 'a' + 10;
    if (h >= 'A' && h <= 'F') digit = h - 'A' + 10;
    if (digit < 0) return Error(escape_at, "\\u escape needs four hex digits");
    cp = cp * 16 + static_cast<uint32_t>(digit);
  }
  return cp;
}

StatusOr<Json> Parser::ParseNumber() {
  const size_t start = pos_;
  if (text_[pos_] == '-') ++pos_;
  if (!AtDigit()) return Error(pos_, "expected a digit in a number, got " + DescribeNext());
  if (text_[pos_++] == '0' && AtDigit()) {
    return Error(start, "numbers cannot have leading zeros");
  }
  while (AtDigit()) ++pos_;
  bool integral = true;
  if (!AtEnd() && text_[pos_] == '.') {
    integral = false, ++pos_;
    if (!AtDigit()) return Error(pos_, "expected a digit after '.', got " + DescribeNext());
    while (AtDigit()) ++pos_;
  }
  if (!AtEnd() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    integral = false, ++pos_;
    if (!AtEnd() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (!AtDigit()) return Error(pos_, "expected a digit in the exponent, got " + DescribeNext());
    while (AtDigit()) ++pos_;
  }
  const char* first = text_.data() + start;
  const char* last = text_.data() + pos_;
  if (integral) {
    int64_t i = 0;
    if (std::from_chars(first, last, i).ec == std::errc()) return Json(i);
  }
  double d = 0;
  if (std::from_chars(first, last, d).ec != std::errc()) {
    std::string number(first, std::min<size_t>(last - first, 40));  // a 50 000-digit one too
    if (number.size() < static_cast<size_t>(last - first)) number += "...";
    return Error(start, "number " + number + " is out of range for a double");
  }
  return Json(d);
}

StatusOr<Json> Parser::ParseLiteral() {
  const std::string_view rest = text_.substr(pos_);
  Json value;  // null
  size_t length = 0;
  if (rest.substr(0, 4) == "true") {
    value = Json(true), length = 4;
  } else if (rest.substr(0, 5) == "false") {
    value = Json(false), length = 5;
  } else if (rest.substr(0, 4) == "null") {
    length = 4;
  } else {
    return Error(pos_, "expected a value (true, false or null), got " + DescribeNext());
  }
  pos_ += length;
  return value;
}

}  // namespace

StatusOr<Json> Json::Parse(std::string_view text) { return Parser(text).ParseDocument(); }

// ---- Typed reads ----

StatusOr<const Json*> Json::Lookup(std::string_view path) const {
  const Json* cur = this;
  size_t i = 0;
  while (i < path.size()) {
    const std::string_view here = path.substr(0, i);
    if (path[i] == '[') {
      const size_t close = path.find(']', i);
      TY_CHECK(close != std::string_view::npos && close > i + 1) << "bad json path " << path;
      size_t index = 0;
      const auto r = std::from_chars(path.data() + i + 1, path.data() + close, index);
      TY_CHECK(r.ptr == path.data() + close) << "bad index in json path " << path;
      if (!cur->is_array()) return TypeError(*cur, here, "an array");
      i = close + 1;
      if (index >= cur->size()) {
        return NotFoundError(FieldName(path.substr(0, i)) + " is missing (the array has " +
                             std::to_string(cur->size()) + " items)");
      }
      cur = &(*cur)[index];
      continue;
    }
    if (path[i] == '.') ++i;
    const size_t end = std::min(path.find_first_of(".[", i), path.size());
    TY_CHECK(end > i) << "empty key in json path " << path;
    if (!cur->is_object()) return TypeError(*cur, here, "an object");
    cur = cur->Find(path.substr(i, end - i));
    if (cur == nullptr) return NotFoundError(FieldName(path.substr(0, end)) + " is missing");
    i = end;
  }
  return cur;
}

Status Json::TypeError(const Json& v, std::string_view path, const char* expected) {
  return InvalidArgumentError(FieldName(path) + ": expected " + expected + ", got " + Describe(v));
}

Status Json::Convert(const Json& v, std::string_view path, bool* out) {
  if (!v.is_bool()) return TypeError(v, path, "a bool");
  *out = v.bool_value();
  return OkStatus();
}

Status Json::Convert(const Json& v, std::string_view path, int64_t* out) {
  if (v.is_integer()) {
    *out = v.int_value();
    return OkStatus();
  }
  // 2^63 is exact as a double; integral doubles in [-2^63, 2^63) convert exactly.
  const double d = v.is_number() ? v.number_value() : 0.5;
  if (d != std::trunc(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0) {
    return TypeError(v, path, "an integer");
  }
  *out = static_cast<int64_t>(d);
  return OkStatus();
}

Status Json::Convert(const Json& v, std::string_view path, int* out) {
  int64_t wide = 0;
  Status s = Convert(v, path, &wide);
  if (!s.ok() || wide < INT_MIN || wide > INT_MAX) {
    return TypeError(v, path, "an integer in [-2147483648, 2147483647]");
  }
  *out = static_cast<int>(wide);
  return OkStatus();
}

Status Json::Convert(const Json& v, std::string_view path, double* out) {
  if (!v.is_number()) return TypeError(v, path, "a number");
  *out = v.number_value();
  return OkStatus();
}

Status Json::Convert(const Json& v, std::string_view path, std::string* out) {
  if (!v.is_string()) return TypeError(v, path, "a string");
  *out = v.string_value();
  return OkStatus();
}

Status Json::Convert(const Json& v, std::string_view, Json* out) {
  *out = v;
  return OkStatus();
}

}  // namespace trainyard
