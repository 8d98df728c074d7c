#include "client/yaml.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "client/spec_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

Json Yaml(const std::string& text) {
  StatusOr<Json> json = ParseYaml(text, "spec.yaml");
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *json : Json();
}

std::string YamlError(const std::string& text) {
  StatusOr<Json> json = ParseYaml(text, "spec.yaml");
  EXPECT_FALSE(json.ok()) << json->Dump();
  return json.ok() ? "" : std::string(json.status().message());
}

TEST(YamlTest, TypesPlainScalarsByTheCoreSchema) {
  Json j = Yaml(R"(
a: 3
b: -0.25
c: 1e-3
d: true
e: False
f: ~
g:
h: hello world
i: "3"
j: '0.5'
k: 0x1f
l: .inf
m: 1.
n: 07
)");
  EXPECT_EQ(*j.Find("a"), Json(3));
  EXPECT_TRUE(j.Find("a")->is_integer());
  EXPECT_EQ(*j.Find("b"), Json(-0.25));
  EXPECT_EQ(*j.Find("c"), Json(1e-3));
  EXPECT_EQ(*j.Find("d"), Json(true));
  EXPECT_EQ(*j.Find("e"), Json(false));
  EXPECT_TRUE(j.Find("f")->is_null());
  EXPECT_TRUE(j.Find("g")->is_null());
  EXPECT_EQ(*j.Find("h"), Json("hello world"));
  EXPECT_EQ(*j.Find("i"), Json("3"));  // quoted: a string
  EXPECT_EQ(*j.Find("j"), Json("0.5"));
  EXPECT_EQ(*j.Find("k"), Json(31));
  EXPECT_TRUE(std::isinf(j.Find("l")->number_value()));
  EXPECT_EQ(*j.Find("m"), Json(1.0));
  EXPECT_EQ(*j.Find("n"), Json(7));
}

TEST(YamlTest, ReadsNestedMappingsSequencesFlowStyleAndAliases) {
  Json j = Yaml(R"(
model:
  mlp: {sizes: [784, 128, 10], activation: relu}
list:
  - 1
  - two
  - {x: 1}
base: &lr 0.05
copy: *lr
)");
  EXPECT_EQ(j.Find("model")->Find("mlp")->Dump(), R"({"sizes":[784,128,10],"activation":"relu"})");
  EXPECT_EQ(j.Find("list")->Dump(), R"([1,"two",{"x":1}])");
  EXPECT_EQ(*j.Find("copy"), Json(0.05));
}

TEST(YamlTest, ObeysExplicitTags) {
  Json j = Yaml("a: !!str 12\nb: !!float 3\nc: !!int \"4\"\n");
  EXPECT_EQ(*j.Find("a"), Json("12"));
  EXPECT_EQ(*j.Find("b"), Json(3.0));
  EXPECT_FALSE(j.Find("b")->is_integer());
  EXPECT_EQ(*j.Find("c"), Json(4));
  EXPECT_THAT(YamlError("a: !!int abc\n"),
              HasSubstr("spec.yaml:1:4: \"abc\" is not a valid !!int"));
}

TEST(YamlTest, ErrorsNameTheLineAndColumn) {
  EXPECT_THAT(YamlError("a: 1\nb: [1, 2\n"), HasSubstr("spec.yaml:"));
  EXPECT_THAT(YamlError("a: 1\na: 2\n"), HasSubstr("spec.yaml:2:1: duplicate key \"a\""));
  EXPECT_THAT(YamlError(""), HasSubstr("empty"));
  EXPECT_THAT(YamlError("a: 1\n---\nb: 2\n"), HasSubstr("second document"));
  EXPECT_THAT(YamlError("? [1, 2]\n: x\n"), HasSubstr("key must be a scalar"));
  EXPECT_THAT(YamlError("a: *nope\n"), HasSubstr("spec.yaml"));
}

// ---- Plain scalars ----

// How plain scalars were typed with std::regex before the scanners replaced it (the regex
// recursed per character and overflowed the stack on long scalars): the reference for short
// text.
Json RegexReference(const std::string& s) {
  static const std::regex int_re("[-+]?[0-9]+");
  static const std::regex float_re(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return Json();
  if (s == "true" || s == "True" || s == "TRUE") return Json(true);
  if (s == "false" || s == "False" || s == "FALSE") return Json(false);
  const bool radix = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o');
  const std::string radix_digits = s[1] == 'x' ? "0123456789abcdefABCDEF" : "01234567";
  if (radix ? s.find_first_not_of(radix_digits, 2) == std::string::npos
            : std::regex_match(s, int_re)) {
    errno = 0;
    const long long v =
        std::strtoll(s.c_str() + (radix ? 2 : 0), nullptr, radix ? (s[1] == 'x' ? 16 : 8) : 10);
    if (errno == ERANGE) return Json(std::strtod(s.c_str(), nullptr));
    return Json(static_cast<int64_t>(v));
  }
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" || s == "+.INF")
    return Json(HUGE_VAL);
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return Json(-HUGE_VAL);
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return Json(std::nan(""));
  if (std::regex_match(s, float_re)) return Json(std::strtod(s.c_str(), nullptr));
  return Json(s);
}

// The type and exact value of `j`, NaN and infinities included (Dump prints those as null).
std::string Typed(const Json& j) {
  if (!j.is_number() || j.is_integer()) return j.Dump();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "double %a", j.number_value());
  return buf;
}

TEST(YamlTest, TypesPlainScalarsExactlyAsTheRegexGrammarDid) {
  // Every text of up to four characters from those that matter to the grammar.
  const std::string alphabet = "0179.eE+-xoaFn";
  std::vector<std::string> texts = {"",
                                    ".inf",
                                    "-.Inf",
                                    "+.INF",
                                    ".nan",
                                    ".NaN",
                                    "null",
                                    "True",
                                    "FALSE",
                                    "0x1f",
                                    "0o17",
                                    "0o8",
                                    "0xg",
                                    "1_000",
                                    "9223372036854775807",
                                    "9223372036854775808",
                                    "-9223372036854775808",
                                    "-9223372036854775809",
                                    "0x7fffffffffffffff",
                                    "0x8000000000000000",
                                    "1.5e+300"};
  std::vector<std::string> shorter = {""};
  for (int length = 1; length <= 4; ++length) {
    std::vector<std::string> longer;
    for (const std::string& prefix : shorter) {
      for (char c : alphabet) longer.push_back(prefix + c);
    }
    texts.insert(texts.end(), longer.begin(), longer.end());
    shorter = std::move(longer);
  }
  for (const std::string& text : texts) {
    ASSERT_EQ(Typed(ParsePlainScalar(text)), Typed(RegexReference(text))) << "for " << text;
  }
}

TEST(YamlTest, ReadsFiftyThousandDigitScalarsWithoutRecursing) {
  const std::string digits(50000, '9');
  const std::string zeros(50000, '0');
  Json j =
      Yaml("batch_size: " + digits + "\nneg: -" + digits + "\nlr: 0." + zeros + "1\n" +
           "path: data/" + digits + ".bin\nnot_float: 1" + digits + "e\nhex: 0x" + digits + "\n");
  EXPECT_EQ(j.Find("batch_size")->number_value(), HUGE_VAL);  // beyond int64 and double
  EXPECT_FALSE(j.Find("batch_size")->is_integer());
  EXPECT_EQ(j.Find("neg")->number_value(), -HUGE_VAL);
  EXPECT_EQ(*j.Find("lr"), Json(0.0));  // 1e-50001 underflows
  EXPECT_FALSE(j.Find("lr")->is_integer());
  EXPECT_EQ(*j.Find("path"), Json("data/" + digits + ".bin"));
  EXPECT_EQ(*j.Find("not_float"), Json("1" + digits + "e"));
  EXPECT_EQ(j.Find("hex")->number_value(), HUGE_VAL);
}

TEST(YamlTest, IntegersBeyondInt64BecomeTheNearestDouble) {
  Json j = Yaml(
      "max: 9223372036854775807\nover: 9223372036854775808\n"
      "min: -9223372036854775808\nunder: -9223372036854775809\n"
      "hex: 0xfffffffffffffffffffff\noct: 0o777777777777777777777777777777\n"
      "oct_exact: 0o1000000000000000000000000000000\n");
  EXPECT_EQ(j.Find("max")->int_value(), INT64_MAX);
  EXPECT_FALSE(j.Find("over")->is_integer());
  EXPECT_EQ(j.Find("over")->number_value(), std::ldexp(1.0, 63));
  EXPECT_EQ(j.Find("min")->int_value(), INT64_MIN);
  EXPECT_EQ(j.Find("under")->number_value(), -std::ldexp(1.0, 63));
  EXPECT_EQ(j.Find("hex")->number_value(), std::ldexp(1.0, 84));  // 2^84 - 1, rounded
  EXPECT_EQ(j.Find("oct")->number_value(), std::ldexp(1.0, 90));  // 8^30 - 1, rounded
  EXPECT_EQ(j.Find("oct_exact")->number_value(), std::ldexp(1.0, 90));
}

// ---- Aliases, size and nesting ----

// A "billion laughs": level i is a list of four aliases of level i - 1, so level 16 is 4^16.
std::string AliasBomb(int levels) {
  std::string text = "l0: &l0 [x, x, x, x]\n";
  for (int i = 1; i <= levels; ++i) {
    const std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [" + prev + ", " + prev +
            ", " + prev + ", " + prev + "]\n";
  }
  return text;
}

std::string MapOfKeys(int keys, const std::string& indent) {
  std::string text;
  for (int i = 0; i < keys; ++i) {
    text += indent + "k" + std::to_string(i) + ": " + std::to_string(i) + "\n";
  }
  return text;
}

TEST(YamlTest, RefusesAnAliasBombBeforeExpandingIt) {
  EXPECT_THAT(YamlError(AliasBomb(16)),
              ContainsRegex("^spec\\.yaml:[0-9]+:[0-9]+: aliases expand to more than 100000 "
                            "values; a job spec needs a few hundred"));
  Json small = Yaml(AliasBomb(3));  // 4^4 strings: fine
  const std::string dump = small.Find("l3")->Dump();
  EXPECT_EQ(std::count(dump.begin(), dump.end(), 'x'), 256);
}

TEST(YamlTest, AllowsAliasesOfALargeMapOnlyUpToTheBudget) {
  const std::string base = "base: &m\n" + MapOfKeys(10000, "  ");
  std::string five = base, twenty = base;
  for (int i = 0; i < 20; ++i) (i < 5 ? five : twenty) += "c" + std::to_string(i) + ": *m\n";
  twenty += five.substr(base.size());
  Json j = Yaml(five);
  ASSERT_EQ(j.size(), 6u);
  EXPECT_EQ(*j.Find("c4"), *j.Find("base"));
  EXPECT_EQ(j.Find("c4")->Find("k9999")->int_value(), 9999);
  // 10 001 values a copy: the anchor's own copy and eight aliases fit, the ninth does not.
  EXPECT_THAT(YamlError(twenty), HasSubstr("spec.yaml:10010:6: aliases expand to more than "
                                           "100000 values"));
}

TEST(YamlTest, RefusesAliasesOfAHugeStringByItsBytes) {
  std::string text = "s: &s " + std::string(1 << 20, 'x') + "\n";
  for (int i = 0; i < 20; ++i) text += "c" + std::to_string(i) + ": *s\n";
  EXPECT_THAT(YamlError(text), HasSubstr("aliases expand to more than 16777216 bytes of text"));
}

TEST(YamlTest, ChargesAnchorsNestedInAnchorsForTheirCopies) {
  // Each of 200 nested anchors copies the 1 000 numbers inside it: 200 000 values in all.
  std::string text = "a: ";
  for (int i = 0; i < 200; ++i) text += "&a" + std::to_string(i) + " [";
  for (int i = 0; i < 1000; ++i) text += std::to_string(i) + ", ";
  text += "0" + std::string(200, ']') + "\n";
  EXPECT_THAT(YamlError(text), HasSubstr("anchored values expand to more than 100000 values"));
}

TEST(YamlTest, ParsesTwoHundredThousandKeysInLinearTime) {
  // Quadratic work (a linear search per key) takes minutes here and trips the test's timeout.
  Json top = Yaml(MapOfKeys(200000, ""));
  ASSERT_EQ(top.size(), 200000u);
  EXPECT_EQ(top.members().back().first, "k199999");
  Json nested = Yaml("m:\n" + MapOfKeys(200000, "  "));
  EXPECT_EQ(nested.Find("m")->Find("k199999")->int_value(), 199999);
  EXPECT_THAT(YamlError(MapOfKeys(200000, "") + "k0: 1\n"),
              HasSubstr("spec.yaml:200001:1: duplicate key \"k0\""));
}

TEST(YamlTest, RefusesNestingDeeperThan256) {
  const Json deep = Yaml(std::string(256, '[') + std::string(256, ']'));
  EXPECT_EQ(deep.size(), 1u);
  EXPECT_THAT(YamlError(std::string(300, '[') + std::string(300, ']')),
              HasSubstr("spec.yaml:1:258: nesting deeper than 256"));
  EXPECT_THAT(YamlError(std::string(100000, '[')), HasSubstr("nesting deeper than 256"));
}

TEST(YamlTest, ShortensLongTextInErrors) {
  const std::string message = YamlError("a: !!int " + std::string(100000, '7') + "x\n");
  EXPECT_THAT(message, HasSubstr("\"777"));
  EXPECT_THAT(message, HasSubstr("...\" is not a valid !!int"));
  EXPECT_LT(message.size(), 120u);
}

TEST(YamlTest, RefusesInvalidUtf8) {
  EXPECT_THAT(YamlError("a: 1\nb: \xc3\xa9\xff\n"),
              HasSubstr("spec.yaml:2:5: invalid leading UTF-8 octet"));
  EXPECT_THAT(YamlError("a: \xed\xa0\x80\n"),
              HasSubstr("spec.yaml:1:4: invalid Unicode character"));
}

TEST(SpecFileTest, OverridesSetTypedValuesAlongAPath) {
  Json j = Yaml("steps: 10\ndata: {fashion_mnist: {}}\n");
  ASSERT_TRUE(ApplyOverride("steps=200", &j).ok());
  ASSERT_TRUE(ApplyOverride("data.fashion_mnist.limit=1000", &j).ok());
  ASSERT_TRUE(ApplyOverride("optimizer.sgd.lr=0.05", &j).ok());
  ASSERT_TRUE(ApplyOverride("name=my-run", &j).ok());
  EXPECT_EQ(*j.Find("steps"), Json(200));
  EXPECT_EQ(*j.Find("data")->Find("fashion_mnist")->Find("limit"), Json(1000));
  EXPECT_EQ(*j.Find("optimizer")->Find("sgd")->Find("lr"), Json(0.05));
  EXPECT_EQ(*j.Find("name"), Json("my-run"));
  EXPECT_THAT(std::string(ApplyOverride("steps", &j).message()), HasSubstr("expected path=value"));
  EXPECT_THAT(std::string(ApplyOverride("steps.x=1", &j).message()),
              HasSubstr("steps is not a mapping"));
  EXPECT_THAT(std::string(ApplyOverride("a..b=1", &j).message()), HasSubstr("empty field name"));
}

}  // namespace
}  // namespace trainyard::client
