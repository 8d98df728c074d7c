// proto/trainyard/v1/job.proto and the C++ reader state the same schema: the same fields, and
// for each the same default, range and allowed values (the .proto's options; the reader's
// struct initialisers, ranges and choices). Either side changed alone fails here.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/spec/job_spec_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/spec/spec_test_util.h"

namespace trainyard::spec {
namespace {

using internal::FieldRule;
using testing::Minimal;
using testing::ProblemsOf;
using testing::SetPath;

// A field of a .proto message: label ("optional", "repeated" or ""), type, name and options;
// an option given more than once, as (allowed) is, keeps every value in order.
struct ProtoField {
  std::string label;
  std::string type;
  std::string name;
  std::map<std::string, std::vector<std::string>> options;
};
using ProtoMessages = std::map<std::string, std::vector<ProtoField>>;

// A word (identifier, number, dotted name), a punctuation character, or the text of a string
// literal with its escapes resolved (`quoted`).
struct Token {
  std::string text;
  bool quoted = false;
};

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

std::vector<Token> Tokenize(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else if (s.compare(i, 2, "//") == 0) {
      i = std::min(s.size(), s.find('\n', i));
    } else if (s[i] == '"') {
      Token t{"", true};
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        char c = s[i];
        if (c == '\\' && i + 1 < s.size()) {  // an escape: \t is a tab, \" a quote, \\ a backslash
          c = s[++i] == 't' ? '\t' : s[i];
        }
        t.text += c;
      }
      ++i;  // the closing quote
      out.push_back(t);
    } else if (IsWordChar(s[i])) {
      size_t end = i;
      while (end < s.size() && IsWordChar(s[end])) ++end;
      out.push_back({s.substr(i, end - i)});
      i = end;
    } else {
      out.push_back({std::string(1, s[i++])});
    }
  }
  return out;
}

// Enough of the .proto grammar for job.proto: messages holding fields (with options) and
// oneofs of fields; every other top-level statement or block is skipped.
class ProtoParser {
 public:
  explicit ProtoParser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  ProtoMessages Parse() {
    while (i_ < t_.size()) {
      if (!Peek("message")) {
        SkipStatement();
        continue;
      }
      ++i_;
      const std::string name = Next();
      Expect("{");
      messages_[name];  // an empty message is one too
      while (i_ < t_.size() && !Peek("}")) {
        if (!Peek("oneof")) {
          Field(name);
          continue;
        }
        i_ += 2;  // "oneof" and its name
        Expect("{");
        while (i_ < t_.size() && !Peek("}")) Field(name);
        Expect("}");
      }
      Expect("}");
    }
    return messages_;
  }

 private:
  // [label] type name = number [ [(option) = value, ...] ] ;
  void Field(const std::string& message) {
    ProtoField f;
    if (Peek("optional") || Peek("repeated")) f.label = Next();
    f.type = Next();
    f.name = Next();
    Expect("=");
    Next();
    if (Peek("[")) {
      do {
        ++i_;  // "[" or ","
        Expect("(");
        const std::string option = Next();
        Expect(")");
        Expect("=");
        f.options[option].push_back(Next());
      } while (Peek(","));
      Expect("]");
    }
    Expect(";");
    messages_[message].push_back(f);
  }
  // Up to the ';' that ends a statement, or past the '}' that closes a block.
  void SkipStatement() {
    for (int depth = 0; i_ < t_.size();) {
      const Token& t = t_[i_++];
      if (t.quoted) continue;
      if (t.text == "{") ++depth;
      if ((t.text == "}" && --depth == 0) || (t.text == ";" && depth == 0)) return;
    }
  }
  bool Peek(const char* text) const {
    return i_ < t_.size() && !t_[i_].quoted && t_[i_].text == text;
  }
  std::string Next() { return i_ < t_.size() ? t_[i_++].text : ""; }
  void Expect(const char* text) {
    EXPECT_TRUE(Peek(text)) << "job.proto: expected '" << text << "' before '" << Next() << "'";
    ++i_;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  ProtoMessages messages_;
};

ProtoMessages ReadProto() {
  std::ifstream in(std::string(TY_SOURCE_DIR) + "/proto/trainyard/v1/job.proto");
  EXPECT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return ProtoParser(Tokenize(text.str())).Parse();
}

std::vector<std::string> OptionValues(const ProtoField& f, const std::string& option) {
  auto it = f.options.find(option);
  return it == f.options.end() ? std::vector<std::string>{} : it->second;
}
std::string OptionValue(const ProtoField& f, const std::string& option) {
  std::vector<std::string> values = OptionValues(f, option);
  EXPECT_LE(values.size(), 1u) << f.name << ": (" << option << ") given twice";
  return values.empty() ? "" : values[0];
}

// What an absent field of this type reads as in proto3: 0, "", false, no entries.
Json ZeroOf(const ProtoField& f) {
  if (f.label == "repeated") return Json::Array();
  if (f.type == "string") return Json("");
  if (f.type == "bool") return Json(false);
  return Json(0);
}

// The field's (default_value): a string field's text, else JSON text; the zero without one.
Json DefaultOf(const ProtoField& f) {
  if (!f.options.count("default_value")) return ZeroOf(f);
  const std::string text = OptionValue(f, "default_value");
  if (f.type == "string") return Json(text);
  StatusOr<Json> json = Json::Parse(text);
  EXPECT_TRUE(json.ok()) << f.name << ": (default_value) \"" << text << "\": " << json.status();
  return json.ok() ? *json : Json();
}

// Compares every field reachable from `message` (at `path`) with the reader's rule of the same
// path, taking the rules it finds out of `rules`.
void ExpectSameRules(const ProtoMessages& proto, const std::string& message,
                     const std::string& path, std::map<std::string, FieldRule>* rules) {
  ASSERT_TRUE(proto.count(message)) << message;
  for (const ProtoField& f : proto.at(message)) {
    const std::string at = path.empty() ? f.name : path + "." + f.name;
    auto it = rules->find(at);
    if (it == rules->end()) {
      ADD_FAILURE() << at << " (" << message << "." << f.name << ") is not in the reader";
      continue;
    }
    const FieldRule rule = it->second;
    rules->erase(it);
    const bool is_message = proto.count(f.type) > 0;
    EXPECT_EQ(rule.message, is_message) << at;
    if (is_message) {
      // A list's entries are described once, at "path[]".
      ExpectSameRules(proto, f.type, f.label == "repeated" ? at + "[]" : at, rules);
      continue;
    }
    const Json want = DefaultOf(f);
    EXPECT_TRUE(rule.default_value == want)
        << at << ": job_spec.h's default " << rule.default_value.Dump() << ", job.proto's "
        << want.Dump();
    EXPECT_EQ(rule.range, OptionValue(f, "range")) << at;
    EXPECT_EQ(rule.allowed, OptionValues(f, "allowed")) << at;
    // Protobuf does not send a zero that is not marked optional, so a typed spec
    // (SubmitJobRequest.spec) could not set such a field to zero.
    if (!(want == ZeroOf(f))) {
      EXPECT_TRUE(f.label == "optional" || f.label == "repeated")
          << at << ": a default other than zero needs `optional`";
    }
  }
}

TEST(JobSpecSchemaTest, ReaderAndProtoStateTheSameDefaultsRangesAndAllowedValues) {
  const ProtoMessages proto = ReadProto();
  std::map<std::string, FieldRule> rules;
  for (const FieldRule& rule : internal::DescribeFields()) {
    EXPECT_TRUE(rules.emplace(rule.path, rule).second) << rule.path << " listed twice";
  }
  EXPECT_GE(rules.size(), 100u);
  ExpectSameRules(proto, "JobSpec", "", &rules);
  for (const auto& [path, rule] : rules) ADD_FAILURE() << path << " is not in job.proto";
}

// A value below the range of every numeric field is refused with the range as job.proto
// writes it: "must be in [1, 4096]", "must be in (0, 86400]", "must be finite and >= 0".
TEST(JobSpecSchemaTest, OutOfRangeErrorsNameTheProtosRange) {
  int checked = 0;
  for (const FieldRule& rule : internal::DescribeFields()) {
    // Fields inside lists of messages are checked by model_graph_test.cc.
    if (rule.range.empty() || rule.path.find("[]") != std::string::npos) continue;
    const bool open_below = rule.range[0] == '>';
    const double lo = std::strtod(rule.range.c_str() + (open_below ? 3 : 1), nullptr);
    const Json below = rule.default_value.is_number() && !rule.default_value.is_integer()
                           ? Json(lo - 1)
                           : Json(static_cast<int64_t>(lo) - 1);
    Json json = Minimal();
    const bool list = rule.default_value.is_array();
    SetPath(&json, rule.path, list ? Json::Array({below}) : below);
    const std::string problems = ProblemsOf(json);
    const std::string field = rule.path + (list ? "[0]" : "") + " = ";
    const std::string what = (open_below ? "must be finite and " : "must be in ") + rule.range;
    const size_t at = problems.find(field);
    ASSERT_NE(at, std::string::npos) << rule.path << "\n" << problems;
    const std::string line = problems.substr(at, problems.find('\n', at) - at);
    EXPECT_THAT(line, ::testing::EndsWith(": " + what)) << rule.path;
    ++checked;
  }
  EXPECT_GE(checked, 60);
}

// The "allowed: ..." list the reader gives for an unknown field at `path` ("" is the top).
std::set<std::string> AllowedAt(const std::string& path) {
  Json json = Minimal();
  std::string key = path.empty() ? "zz_unknown" : path + ".zz_unknown";
  SetPath(&json, key, 1);
  std::string text = ProblemsOf(json);
  std::smatch match;
  std::regex line_re("unknown field " + std::regex_replace(key, std::regex(R"(\.)"), R"(\.)") +
                     "[^\n]*allowed: ([^\n]*)");
  EXPECT_TRUE(std::regex_search(text, match, line_re)) << text;
  std::set<std::string> names;
  if (match.empty() || match[1] == "none") return names;
  std::stringstream list(match[1]);
  for (std::string name; std::getline(list, name, ',');) {
    names.insert(name.substr(name.find_first_not_of(' ')));
  }
  return names;
}

void ExpectSameFields(const ProtoMessages& proto, const std::string& message,
                      const std::string& path, int* checked) {
  ASSERT_TRUE(proto.count(message)) << message;
  std::set<std::string> want;
  for (const ProtoField& f : proto.at(message)) want.insert(f.name);
  EXPECT_EQ(AllowedAt(path), want) << "message " << message << " at '" << path << "'";
  ++*checked;
  for (const ProtoField& f : proto.at(message)) {
    if (proto.count(f.type) && f.label != "repeated") {
      ExpectSameFields(proto, f.type, path.empty() ? f.name : path + "." + f.name, checked);
    }
  }
}

// The names a user is told are allowed, message by message, are job.proto's.
TEST(JobSpecSchemaTest, ReaderAndProtoNameTheSameFields) {
  const ProtoMessages proto = ReadProto();
  ASSERT_GE(proto.size(), 20u);
  int checked = 0;
  ExpectSameFields(proto, "JobSpec", "", &checked);
  EXPECT_GE(checked, 22);  // every message path reachable from JobSpec
}

}  // namespace
}  // namespace trainyard::spec
