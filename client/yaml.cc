#include "client/yaml.h"

#include <yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>

namespace trainyard::client {
namespace {

const std::regex& IntRe() {
  static const std::regex re("[-+]?[0-9]+");
  return re;
}
const std::regex& FloatRe() {
  static const std::regex re(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  return re;
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
std::optional<Json> AsInt(const std::string& s) {
  int base = 10;
  std::string digits = s;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    base = s[1] == 'x' ? 16 : 8;
    digits = s.substr(2);
    if (digits.find_first_not_of(base == 16 ? "0123456789abcdefABCDEF" : "01234567") !=
        std::string::npos) {
      return std::nullopt;
    }
  } else if (!std::regex_match(s, IntRe())) {
    return std::nullopt;
  }
  errno = 0;
  long long v = std::strtoll(digits.c_str(), nullptr, base);
  if (errno == ERANGE) return Json(std::strtod(s.c_str(), nullptr));  // too big: a float
  return Json(static_cast<int64_t>(v));
}
std::optional<Json> AsFloat(const std::string& s) {
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" || s == "+.INF") {
    return Json(HUGE_VAL);
  }
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return Json(-HUGE_VAL);
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return Json(std::nan(""));
  if (!std::regex_match(s, FloatRe())) return std::nullopt;
  return Json(std::strtod(s.c_str(), nullptr));
}

// Builds Json values from libyaml's event stream.
class Builder {
 public:
  Builder(std::string_view text, std::string source) : source_(std::move(source)) {
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

  StatusOr<Event> Next() {
    Event e;
    if (!yaml_parser_parse(&parser_, e.get())) {
      const yaml_mark_t& mark = parser_.problem_mark;
      std::string what = parser_.problem ? parser_.problem : "invalid YAML";
      if (parser_.context) what = std::string(parser_.context) + ": " + what;
      return InvalidArgumentError(source_ + ":" + std::to_string(mark.line + 1) + ":" +
                                  std::to_string(mark.column + 1) + ": " + what);
    }
    return e;
  }

  Status Error(const Event& e, const std::string& what) const {
    const yaml_mark_t& mark = (*e).start_mark;
    return InvalidArgumentError(source_ + ":" + std::to_string(mark.line + 1) + ":" +
                                std::to_string(mark.column + 1) + ": " + what);
  }

  static std::string Anchor(const unsigned char* anchor) {
    return anchor ? reinterpret_cast<const char*>(anchor) : "";
  }

  StatusOr<Json> Node(Event& e, int depth) {
    if (depth > 256) return Error(e, "nesting deeper than 256");
    switch (e.type()) {
      case YAML_ALIAS_EVENT: {
        auto it = anchors_.find(Anchor((*e).data.alias.anchor));
        if (it == anchors_.end()) return Error(e, "unknown alias");
        return it->second;
      }
      case YAML_SCALAR_EVENT: {
        const auto& s = (*e).data.scalar;
        std::string value(reinterpret_cast<const char*>(s.value), s.length);
        ASSIGN_OR_RETURN(Json v, Scalar(e, value));
        if (s.anchor) anchors_[Anchor(s.anchor)] = v;
        return v;
      }
      case YAML_SEQUENCE_START_EVENT: {
        std::string anchor = Anchor((*e).data.sequence_start.anchor);
        Json::Items items;
        for (;;) {
          ASSIGN_OR_RETURN(Event item, Next());
          if (item.type() == YAML_SEQUENCE_END_EVENT) break;
          ASSIGN_OR_RETURN(Json v, Node(item, depth + 1));
          items.push_back(std::move(v));
        }
        Json v = Json::Array(std::move(items));
        if (!anchor.empty()) anchors_[anchor] = v;
        return v;
      }
      case YAML_MAPPING_START_EVENT: {
        std::string anchor = Anchor((*e).data.mapping_start.anchor);
        Json v = Json::Object();
        for (;;) {
          ASSIGN_OR_RETURN(Event key, Next());
          if (key.type() == YAML_MAPPING_END_EVENT) break;
          if (key.type() != YAML_SCALAR_EVENT) return Error(key, "a mapping key must be a scalar");
          const auto& k = (*key).data.scalar;
          std::string name(reinterpret_cast<const char*>(k.value), k.length);
          if (v.Find(name) != nullptr) return Error(key, "duplicate key \"" + name + "\"");
          ASSIGN_OR_RETURN(Event value, Next());
          ASSIGN_OR_RETURN(Json item, Node(value, depth + 1));
          v.Set(std::move(name), std::move(item));
        }
        if (!anchor.empty()) anchors_[anchor] = v;
        return v;
      }
      default:
        return Error(e, "unexpected YAML event");
    }
  }

  StatusOr<Json> Scalar(const Event& e, const std::string& value) {
    const auto& s = (*e).data.scalar;
    std::string tag = s.tag ? reinterpret_cast<const char*>(s.tag) : "";
    const std::string core = "tag:yaml.org,2002:";
    if (!tag.empty() && tag != "!") {
      if (tag.compare(0, core.size(), core) != 0) return Error(e, "unsupported tag " + tag);
      std::string kind = tag.substr(core.size());
      std::optional<Json> v;
      if (kind == "str") v = Json(value);
      if (kind == "null") v = AsNull(value);
      if (kind == "bool") v = AsBool(value);
      if (kind == "int") v = AsInt(value);
      if (kind == "float") v = AsInt(value) ? AsFloat(value + ".0") : AsFloat(value);
      if (!v) return Error(e, "\"" + value + "\" is not a valid !!" + kind);
      return *v;
    }
    if (s.style != YAML_PLAIN_SCALAR_STYLE || tag == "!") return Json(value);
    return ParsePlainScalar(value);
  }

  yaml_parser_t parser_;
  std::string source_;
  std::map<std::string, Json> anchors_;
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
