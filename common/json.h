// Json: a JSON value for configs, job specs and file headers (safetensors). Objects keep their
// members in insertion order and hold each key at most once; numbers remember whether their
// text was an integer that fits int64, so such values read back exactly.
//
//   ASSIGN_OR_RETURN(Json spec, Json::Parse(text));
//   ASSIGN_OR_RETURN(double lr, spec.Get<double>("optimizer.lr"));
//   ASSIGN_OR_RETURN(int64_t warmup, spec.GetOr<int64_t>("optimizer.warmup_steps", 0));
//   Json out = Json::Object({{"step", 10}, {"loss", 0.25}, {"tags", Json::Array({"a", "b"})}});
//   std::string text = out.Dump();  // {"step":10,"loss":0.25,"tags":["a","b"]}
//
// Reading the wrong kind through a plain accessor (string_value() of a number) is a bug and
// fails a TY_CHECK; input checked at run time goes through Get<T>, which returns a Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace trainyard {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Items = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Members = std::vector<Member>;  // insertion order; keys unique

  Json() = default;                                          // null
  Json(std::nullptr_t) {}                                    // NOLINT: implicit, like a literal
  Json(bool b) : value_(std::in_place_type<bool>, b) {}      // NOLINT
  Json(double d) : value_(std::in_place_type<double>, d) {}  // NOLINT
  Json(const char* s) : value_(std::in_place_type<std::string>, s) {}             // NOLINT
  Json(std::string s) : value_(std::in_place_type<std::string>, std::move(s)) {}  // NOLINT
  Json(std::string_view s) : value_(std::in_place_type<std::string>, s) {}        // NOLINT
  // Integers are kept exactly; an unsigned value above INT64_MAX becomes a double.
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                                         int> = 0>
  Json(T v) {  // NOLINT
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (v > static_cast<T>(INT64_MAX)) {
        value_ = static_cast<double>(v);
        return;
      }
    }
    value_ = static_cast<int64_t>(v);
  }

  static Json Array(std::initializer_list<Json> items = {}) { return Array(Items(items)); }
  static Json Array(Items items);
  // TY_CHECK-fails on a repeated key (a bug in the caller's literal).
  static Json Object(std::initializer_list<Member> members = {}) {
    return Object(Members(members));
  }
  static Json Object(Members members);

  // Parses one JSON value (RFC 8259) surrounded by optional whitespace; a leading UTF-8 byte
  // order mark is skipped. Rejects duplicate keys, invalid UTF-8, lone surrogates and nesting
  // deeper than 512. Errors are InvalidArgument, "invalid json at line 3, column 7: expected
  // ...", where lines and columns count from 1 and columns count UTF-8 code points. Integer
  // text that fits int64 is kept exactly; other numbers are the nearest double.
  static StatusOr<Json> Parse(std::string_view text);

  // Compact when indent < 0; otherwise one item per line, indented by `indent` spaces per
  // level. Integers print exactly, other numbers in the shortest form that parses back to the
  // same double (always with a '.' or exponent, so they stay non-integers: 3.0 prints "3.0").
  // NaN and infinities have no JSON form and print as null. Strings are escaped as JSON
  // requires and UTF-8 passes through; a byte that is not valid UTF-8 prints as \ufffd.
  std::string Dump(int indent = -1) const;

  Type type() const;
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_number() const { return type() == Type::kNumber; }
  // A number held exactly as int64 (from integer text or an integral constructor).
  bool is_integer() const { return std::holds_alternative<int64_t>(value_); }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }

  // Plain accessors: the value must have the kind asked for (TY_CHECK).
  bool bool_value() const;
  double number_value() const;  // an integer converts to the nearest double
  int64_t int_value() const;    // needs is_integer()
  const std::string& string_value() const;
  const Items& items() const;
  const Members& members() const;
  size_t size() const;  // items of an array or members of an object
  const Json& operator[](size_t i) const { return items().at(i); }

  // The member named `key` (no path syntax), or nullptr when absent or not an object.
  // Linear in the number of members.
  const Json* Find(std::string_view key) const;
  Json* Find(std::string_view key);

  // Builders. A null value first becomes an empty object (Set) or array (Append). Set replaces
  // an existing member in place, keeping its position, else appends; linear in members.
  Json& Set(std::string key, Json value);
  Json& Append(Json value);

  // Typed reads by path: dot-separated keys with optional [index] steps, e.g.
  // "model.layers[2].width"; "" is this value. T is bool, int, int64_t, double, std::string,
  // Json or std::vector of one of those. Errors name the path and the value found:
  //   NotFound:        field "optimizer.lr" is missing
  //   InvalidArgument: field "optimizer.lr": expected a number, got string "fast"
  // Integers accept any number with an integral value in range (1e3 reads as 1000). Keys
  // containing '.' or '[' can only be reached through Find().
  template <typename T>
  StatusOr<T> Get(std::string_view path) const {
    ASSIGN_OR_RETURN(const Json* v, Lookup(path));
    T out{};
    RETURN_IF_ERROR(Convert(*v, path, &out));
    return out;
  }
  // Like Get, but a missing or null value gives `fallback`.
  template <typename T>
  StatusOr<T> GetOr(std::string_view path, T fallback) const {
    StatusOr<const Json*> v = Lookup(path);
    if (!v.ok() && v.status().code() == StatusCode::kNotFound) return fallback;
    if (!v.ok()) return v.status();
    if ((*v)->is_null()) return fallback;
    T out{};
    RETURN_IF_ERROR(Convert(**v, path, &out));
    return out;
  }
  StatusOr<std::string> GetOr(std::string_view path, const char* fallback) const {
    return GetOr<std::string>(path, std::string(fallback));
  }

  // Deep equality; object members compare in order, integers and doubles by value.
  friend bool operator==(const Json& a, const Json& b);
  friend bool operator!=(const Json& a, const Json& b) { return !(a == b); }

 private:
  // The value at `path`: NotFound when a key or index is absent, InvalidArgument when a step
  // meets a value of the wrong kind. A malformed path is a bug (TY_CHECK).
  StatusOr<const Json*> Lookup(std::string_view path) const;

  static Status Convert(const Json& v, std::string_view path, bool* out);
  static Status Convert(const Json& v, std::string_view path, int* out);
  static Status Convert(const Json& v, std::string_view path, int64_t* out);
  static Status Convert(const Json& v, std::string_view path, double* out);
  static Status Convert(const Json& v, std::string_view path, std::string* out);
  static Status Convert(const Json& v, std::string_view path, Json* out);
  template <typename T>
  static Status Convert(const Json& v, std::string_view path, std::vector<T>* out) {
    if (!v.is_array()) return TypeError(v, path, "an array");
    out->assign(v.size(), T{});
    for (size_t i = 0; i < v.size(); ++i) {
      std::string item_path = std::string(path) + "[" + std::to_string(i) + "]";
      RETURN_IF_ERROR(Convert(v[i], item_path, &(*out)[i]));
    }
    return OkStatus();
  }
  // field "<path>": expected <expected>, got <description of v>
  static Status TypeError(const Json& v, std::string_view path, const char* expected);

  void DumpTo(std::string* out, int indent, int depth) const;

  // double holds non-integers (and integers too big for int64); int64_t holds exact integers.
  std::variant<std::nullptr_t, bool, double, int64_t, std::string, Items, Members> value_;
};

}  // namespace trainyard
