#include "client/yaml.h"

#include <yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <unordered_set>

namespace trainyard::client {
namespace {

constexpr int kMaxDepth = 256;

// ---- Plain scalars ----
// Hand-written scanners rather than std::regex, whose matcher recurses once per character and
// overflows the stack on a long scalar (50 000 digits). Each scans its text once.

bool IsDigit(char c, int base) {
  if (base == 16) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  return c >= '0' && c < '0' + base;
}

// The index just past the run of base-`base` digits that starts at s[i].
size_t DigitsEnd(std::string_view s, size_t i, int base = 10) {
  while (i < s.size() && IsDigit(s[i], base)) ++i;
  return i;
}

size_t SignLength(std::string_view s) { return !s.empty() && (s[0] == '-' || s[0] == '+'); }

// [-+]?[0-9]+
bool IsDecimalInt(std::string_view s) {
  const size_t start = SignLength(s);
  const size_t end = DigitsEnd(s, start);
  return end > start && end == s.size();
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsDecimalFloat(std::string_view s) {
  size_t i = SignLength(s);
  const size_t int_end = DigitsEnd(s, i);
  bool has_digits = int_end > i;
  i = int_end;
  if (i < s.size() && s[i] == '.') {
    const size_t frac_end = DigitsEnd(s, i + 1);
    has_digits = has_digits || frac_end > i + 1;
    i = frac_end;
  }
  if (!has_digits) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const size_t exp_start = i + 1 + SignLength(s.substr(i + 1));
    i = DigitsEnd(s, exp_start);
    if (i == exp_start) return false;
  }
  return i == s.size();
}

// Octal digits (no prefix) as the nearest double: rewritten in hexadecimal, which strtod
// rounds exactly (it does not read octal).
double OctalToDouble(std::string_view digits) {
  std::string hex;  // least significant digit first
  unsigned bits = 0;
  int nbits = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    bits |= static_cast<unsigned>(*it - '0') << nbits;
    for (nbits += 3; nbits >= 4; nbits -= 4, bits >>= 4)
      hex.push_back("0123456789abcdef"[bits & 15]);
  }
  hex.push_back("0123456789abcdef"[bits & 15]);
  hex += "x0";
  std::reverse(hex.begin(), hex.end());
  return std::strtod(hex.c_str(), nullptr);
}

std::optional<Json> AsNull(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return Json();
  return std::nullopt;
}
std::optional<Json> AsBool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return Json(true);
  if (s == "false" || s == "False" || s == "FALSE") return Json(false);
  return std::nullopt;
}
// Decimal, 0x hex or 0o octal; beyond int64 the nearest double (inf when beyond that too),
// which the spec's range checks then refuse.
std::optional<Json> AsInt(const std::string& s) {
  int base = 10;
  size_t start = 0;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    base = s[1] == 'x' ? 16 : 8;
    start = 2;
    if (DigitsEnd(s, start, base) != s.size()) return std::nullopt;
  } else if (!IsDecimalInt(s)) {
    return std::nullopt;
  }
  errno = 0;
  const long long v = std::strtoll(s.c_str() + start, nullptr, base);
  if (errno != ERANGE) return Json(static_cast<int64_t>(v));
  if (base == 8) return Json(OctalToDouble(std::string_view(s).substr(start)));
  return Json(std::strtod(s.c_str(), nullptr));  // strtod reads "0x..." as hexadecimal
}
std::optional<Json> AsFloat(const std::string& s) {
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" || s == "+.INF") {
    return Json(HUGE_VAL);
  }
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return Json(-HUGE_VAL);
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return Json(std::nan(""));
  if (!IsDecimalFloat(s)) return std::nullopt;
  return Json(std::strtod(s.c_str(), nullptr));
}

// `text` for an error message, cut to 60 bytes (at a UTF-8 boundary) with "..." after.
std::string Shortened(std::string_view text) {
  if (text.size() <= 60) return std::string(text);
  size_t cut = 57;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

// ---- Event stream ----

// An owned libyaml event.
class Event {
 public:
  Event() { event_.type = YAML_NO_EVENT; }
  ~Event() { yaml_event_delete(&event_); }
  Event(Event&& o) noexcept : event_(o.event_) { o.event_.type = YAML_NO_EVENT; }
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      yaml_event_delete(&event_);
      event_ = o.event_;
      o.event_.type = YAML_NO_EVENT;
    }
    return *this;
  }
  yaml_event_type_t type() const { return event_.type; }
  yaml_event_t* get() { return &event_; }
  const yaml_event_t& operator*() const { return event_; }

 private:
  yaml_event_t event_;
};

std::string ToString(const unsigned char* s) { return s ? reinterpret_cast<const char*>(s) : ""; }
std::string ScalarText(const Event& e) {
  const auto& s = (*e).data.scalar;
  return std::string(reinterpret_cast<const char*>(s.value), s.length);
}

// Note [Alias budget]
// An alias copies the value its anchor names, so a few lines of nested anchors ("billion
// laughs": nine anchors, each a list of four aliases of the one before) expand to 4^9 values,
// and aliases of a large mapping multiply it. Storing an anchored value copies it as well, and
// anchors nested in anchored values copy their contents once per level. So every such copy is
// charged to one budget per document, before it is made: values (an alias of a value holding k
// values costs k) and the bytes of the strings and keys in them. A job spec needs a few hundred
// values; the limits are far above that and far below what exhausts memory. Without anchors
// and aliases the work is linear in the text and needs no budget.
constexpr size_t kMaxCopiedValues = 100000;
constexpr size_t kMaxCopiedBytes = size_t{16} << 20;

// What a Json value holds: its values (itself included) and the bytes of its strings and keys.
struct Size {
  size_t values = 0;
  size_t bytes = 0;
};

// Builds Json values from libyaml's event stream.
class Builder {
 public:
  Builder(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {
    yaml_parser_initialize(&parser_);
    yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                                 text.size());
  }
  ~Builder() { yaml_parser_delete(&parser_); }
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  StatusOr<Json> Document() {
    ASSIGN_OR_RETURN(Event e, Next());  // STREAM-START
    ASSIGN_OR_RETURN(e, Next());
    if (e.type() == YAML_STREAM_END_EVENT) return Error(e, "the file is empty; expected a mapping");
    if (e.type() != YAML_DOCUMENT_START_EVENT) return Error(e, "expected a document");
    ASSIGN_OR_RETURN(e, Next());
    ASSIGN_OR_RETURN(Json root, Node(e, 0));
    ASSIGN_OR_RETURN(e, Next());  // DOCUMENT-END
    ASSIGN_OR_RETURN(e, Next());
    if (e.type() != YAML_STREAM_END_EVENT) {
      return Error(e, "found a second document; a spec is one document");
    }
    return root;
  }

 private:
  // An anchored value and its Size.
  struct Anchored {
    Json value;
    Size size;
  };

  StatusOr<Event> Next() {
    Event e;
    if (!yaml_parser_parse(&parser_, e.get())) {
      std::string what = parser_.problem ? parser_.problem : "invalid YAML";
      if (parser_.context) what = std::string(parser_.context) + ": " + what;
      // A reader error (bad UTF-8, a control character) has an offset but no mark.
      if (parser_.error == YAML_READER_ERROR) return ErrorAtOffset(parser_.problem_offset, what);
      return ErrorAt(parser_.problem_mark.line, parser_.problem_mark.column, what);
    }
    return e;
  }

  Status ErrorAt(size_t line, size_t column, const std::string& what) const {
    return InvalidArgumentError(source_ + ":" + std::to_string(line + 1) + ":" +
                                std::to_string(column + 1) + ": " + what);
  }
  Status Error(const Event& e, const std::string& what) const {
    return ErrorAt((*e).start_mark.line, (*e).start_mark.column, what);
  }
  // Columns count characters, as libyaml's do.
  Status ErrorAtOffset(size_t offset, const std::string& what) const {
    size_t line = 0, column = 0;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line, column = 0;
      } else if ((static_cast<unsigned char>(text_[i]) & 0xc0) != 0x80) {
        ++column;
      }
    }
    return ErrorAt(line, column, what);
  }

  // Charges a copy of a value of `size` to the budget (Note [Alias budget]); `copier` is what
  // makes it, for the message.
  Status Charge(const Event& e, const Size& size, const char* copier) {
    copied_.values += size.values;
    copied_.bytes += size.bytes;
    const char* advice = "; a job spec needs a few hundred: write the values out instead";
    if (copied_.values > kMaxCopiedValues) {
      return Error(e, std::string(copier) + " expand to more than " +
                          std::to_string(kMaxCopiedValues) + " values" + advice);
    }
    if (copied_.bytes > kMaxCopiedBytes) {
      return Error(e, std::string(copier) + " expand to more than " +
                          std::to_string(kMaxCopiedBytes) + " bytes of text" + advice);
    }
    return OkStatus();
  }

  // The value `e` starts (an alias, a scalar, a sequence or a mapping, with what it holds),
  // stored under its anchor when it has one.
  StatusOr<Json> Node(Event& e, int depth) {
    if (depth > kMaxDepth) return Error(e, "nesting deeper than " + std::to_string(kMaxDepth));
    if (e.type() == YAML_ALIAS_EVENT) return Alias(e);
    const Size before = built_;
    ++built_.values;
    std::string anchor;
    StatusOr<Json> v = Json();
    switch (e.type()) {
      case YAML_SCALAR_EVENT:
        anchor = ToString((*e).data.scalar.anchor);
        built_.bytes += (*e).data.scalar.length;
        v = Scalar(e, ScalarText(e));
        break;
      case YAML_SEQUENCE_START_EVENT:
        anchor = ToString((*e).data.sequence_start.anchor);
        v = Sequence(depth);
        break;
      case YAML_MAPPING_START_EVENT:
        anchor = ToString((*e).data.mapping_start.anchor);
        v = Mapping(depth);
        break;
      default:
        return Error(e, "unexpected YAML event");
    }
    if (!v.ok() || anchor.empty()) return v;
    const Size size{built_.values - before.values, built_.bytes - before.bytes};
    RETURN_IF_ERROR(Charge(e, size, "anchored values"));
    anchors_[anchor] = Anchored{*v, size};
    return v;
  }

  StatusOr<Json> Alias(const Event& e) {
    const std::string name = ToString((*e).data.alias.anchor);
    const auto it = anchors_.find(name);
    if (it == anchors_.end()) return Error(e, "unknown alias *" + Shortened(name));
    const Size& size = it->second.size;
    RETURN_IF_ERROR(Charge(e, size, "aliases"));
    built_.values += size.values;
    built_.bytes += size.bytes;
    return it->second.value;
  }

  StatusOr<Json> Sequence(int depth) {
    Json::Items items;
    for (;;) {
      ASSIGN_OR_RETURN(Event item, Next());
      if (item.type() == YAML_SEQUENCE_END_EVENT) break;
      ASSIGN_OR_RETURN(Json v, Node(item, depth + 1));
      items.push_back(std::move(v));
    }
    return Json::Array(std::move(items));
  }

  // Linear in the members: a hash set finds repeated keys, and the members are collected
  // before the object is made (Json::Set would search them all for each key).
  StatusOr<Json> Mapping(int depth) {
    Json::Members members;
    std::unordered_set<std::string> keys;
    for (;;) {
      ASSIGN_OR_RETURN(Event key, Next());
      if (key.type() == YAML_MAPPING_END_EVENT) break;
      if (key.type() != YAML_SCALAR_EVENT) return Error(key, "a mapping key must be a scalar");
      std::string name = ScalarText(key);
      if (!keys.insert(name).second) return Error(key, "duplicate key \"" + Shortened(name) + "\"");
      built_.bytes += name.size();
      ASSIGN_OR_RETURN(Event value, Next());
      ASSIGN_OR_RETURN(Json item, Node(value, depth + 1));
      members.emplace_back(std::move(name), std::move(item));
    }
    return Json::Object(std::move(members));
  }

  StatusOr<Json> Scalar(const Event& e, const std::string& value) {
    const auto& s = (*e).data.scalar;
    const std::string tag = ToString(s.tag);
    const std::string core = "tag:yaml.org,2002:";
    if (!tag.empty() && tag != "!") {
      if (tag.compare(0, core.size(), core) != 0) {
        return Error(e, "unsupported tag " + Shortened(tag));
      }
      std::string kind = tag.substr(core.size());
      std::optional<Json> v;
      if (kind == "str") v = Json(value);
      if (kind == "null") v = AsNull(value);
      if (kind == "bool") v = AsBool(value);
      if (kind == "int") v = AsInt(value);
      if (kind == "float") v = AsInt(value) ? AsFloat(value + ".0") : AsFloat(value);
      if (!v) return Error(e, "\"" + Shortened(value) + "\" is not a valid !!" + Shortened(kind));
      return *v;
    }
    if (s.style != YAML_PLAIN_SCALAR_STYLE || tag == "!") return Json(value);
    return ParsePlainScalar(value);
  }

  yaml_parser_t parser_;
  std::string_view text_;
  std::string source_;
  std::map<std::string, Anchored> anchors_;
  Size built_;   // of every value built so far, copies included
  Size copied_;  // of the copies anchors and aliases made (Note [Alias budget])
};

}  // namespace

Json ParsePlainScalar(std::string_view text) {
  std::string s(text);
  if (auto v = AsNull(s)) return *v;
  if (auto v = AsBool(s)) return *v;
  if (auto v = AsInt(s)) return *v;
  if (auto v = AsFloat(s)) return *v;
  return Json(s);
}

StatusOr<Json> ParseYaml(std::string_view text, const std::string& source) {
  Builder builder(text, source);
  return builder.Document();
}

}  // namespace trainyard::client
