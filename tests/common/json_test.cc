#include "common/json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace trainyard {
namespace {

using ::testing::HasSubstr;

Json MustParse(std::string_view text) {
  StatusOr<Json> j = Json::Parse(text);
  EXPECT_TRUE(j.ok()) << j.status() << " for " << text;
  return j.ok() ? *j : Json();
}

std::string ParseError(std::string_view text) {
  StatusOr<Json> j = Json::Parse(text);
  EXPECT_FALSE(j.ok()) << "parsed " << text;
  if (j.ok()) return "";
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  return j.status().message();
}

TEST(JsonTest, ParsesEveryKindOfValue) {
  Json j = MustParse(R"( {"n": null, "t": true, "f": false, "i": -12, "d": 2.5e-3,
                          "s": "hi", "a": [1, [2, {}], []], "o": {"k": "v"}} )");
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j.Find("n")->is_null());
  EXPECT_TRUE(j.Find("t")->bool_value());
  EXPECT_FALSE(j.Find("f")->bool_value());
  EXPECT_TRUE(j.Find("i")->is_integer());
  EXPECT_EQ(j.Find("i")->int_value(), -12);
  EXPECT_FALSE(j.Find("d")->is_integer());
  EXPECT_DOUBLE_EQ(j.Find("d")->number_value(), 0.0025);
  EXPECT_EQ(j.Find("s")->string_value(), "hi");
  const Json& a = *j.Find("a");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[1][0].int_value(), 2);
  EXPECT_TRUE(a[1][1].is_object());
  EXPECT_EQ(a[1][1].size(), 0u);
  EXPECT_EQ(a[2].size(), 0u);
  EXPECT_EQ(j.Find("o")->Find("k")->string_value(), "v");
  EXPECT_EQ(j.Find("missing"), nullptr);
}

TEST(JsonTest, CompactDumpRoundTripsToTheSameText) {
  const std::string text =
      R"({"name":"mlp","layers":[784,128,10],"lr":0.001,"nested":{"a":[true,false,null],)"
      R"("b":{}},"empty":[],"neg":-3.5e-07,"big":1e+300})";
  Json j = MustParse(text);
  EXPECT_EQ(j.Dump(), text);
  EXPECT_EQ(MustParse(j.Dump()), j);
}

TEST(JsonTest, ObjectsKeepInsertionOrder) {
  Json j = MustParse(R"({"zeta": 1, "alpha": 2, "mid": 3})");
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.members()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"zeta", "alpha", "mid"}));
  j.Set("beta", 4).Set("zeta", 10);  // replaces in place, appends new keys
  EXPECT_EQ(j.Dump(), R"({"zeta":10,"alpha":2,"mid":3,"beta":4})");
}

TEST(JsonTest, BuildersMakeNestedValues) {
  Json j = Json::Object({{"step", 10}, {"loss", 0.25}, {"tags", Json::Array({"a", "b"})}});
  Json list;
  list.Append(1).Append(Json::Object({{"x", nullptr}}));
  j.Set("list", list);
  EXPECT_EQ(j.Dump(), R"({"step":10,"loss":0.25,"tags":["a","b"],"list":[1,{"x":null}]})");
  EXPECT_EQ(Json::Array().Dump(), "[]");
  EXPECT_EQ(Json::Object().Dump(), "{}");
  EXPECT_EQ(Json(std::string("s")).Dump(), R"("s")");
  EXPECT_EQ(Json(std::string_view("v")).Dump(), R"("v")");
  EXPECT_EQ(Json(uint64_t{7}).int_value(), 7);
}

TEST(JsonTest, IndentedDumpPutsOneItemPerLine) {
  Json j = Json::Object({{"a", 1}, {"b", Json::Array({true, Json::Object()})}, {"c", "x"}});
  EXPECT_EQ(j.Dump(2),
            "{\n"
            "  \"a\": 1,\n"
            "  \"b\": [\n"
            "    true,\n"
            "    {}\n"
            "  ],\n"
            "  \"c\": \"x\"\n"
            "}");
  EXPECT_EQ(MustParse(j.Dump(4)), j);
}

TEST(JsonTest, Int64ExtremesStayExact) {
  Json j = MustParse(R"([9223372036854775807, -9223372036854775808, 9007199254740993])");
  EXPECT_EQ(j[0].int_value(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(j[1].int_value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(j[2].int_value(), 9007199254740993);  // 2^53 + 1: not representable as a double
  EXPECT_EQ(j.Dump(), "[9223372036854775807,-9223372036854775808,9007199254740993]");
  EXPECT_EQ(*j.Get<int64_t>("[2]"), 9007199254740993);
}

TEST(JsonTest, IntegersBeyondInt64BecomeDoubles) {
  Json j = MustParse("18446744073709551616");
  EXPECT_TRUE(j.is_number());
  EXPECT_FALSE(j.is_integer());
  EXPECT_DOUBLE_EQ(j.number_value(), 18446744073709551616.0);
  EXPECT_EQ(Json(std::numeric_limits<uint64_t>::max()).is_integer(), false);
}

TEST(JsonTest, DoublesPrintShortestAndRoundTripExactly) {
  const std::vector<double> values = {0.1,      1.0 / 3,
                                      -2.5,     1e-300,
                                      5e-324,   1.7976931348623157e308,
                                      123456.0, -0.0,
                                      3.0,      0.30000000000000004};
  for (double d : values) {
    const std::string text = Json(d).Dump();
    Json back = MustParse(text);
    EXPECT_FALSE(back.is_integer()) << text;  // doubles keep a '.' or an exponent
    EXPECT_EQ(back.number_value(), d) << text;
    EXPECT_EQ(std::signbit(back.number_value()), std::signbit(d)) << text;
  }
  EXPECT_EQ(Json(0.1).Dump(), "0.1");
  EXPECT_EQ(Json(3.0).Dump(), "3.0");
  EXPECT_EQ(Json(-0.0).Dump(), "-0.0");
  EXPECT_EQ(Json(0.30000000000000004).Dump(), "0.30000000000000004");
  EXPECT_EQ(Json(std::nan("")).Dump(), "null");
  EXPECT_EQ(Json(-HUGE_VAL).Dump(), "null");
}

TEST(JsonTest, EscapesAreDecodedAndReencoded) {
  Json j = MustParse(R"("q\" b\\ s\/ \b\f\n\r\t \u0001 \u00e9 \u20ac \ud83d\ude00")");
  EXPECT_EQ(j.string_value(), "q\" b\\ s/ \b\f\n\r\t \x01 \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  // Non-ASCII passes through as UTF-8; control characters use short or \u escapes.
  EXPECT_EQ(j.Dump(),
            "\"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001 \xC3\xA9 \xE2\x82\xAC "
            "\xF0\x9F\x98\x80\"");
  EXPECT_EQ(MustParse(j.Dump()), j);
  EXPECT_EQ(Json(std::string("nul\0x", 5)).Dump(), "\"nul\\u0000x\"");
  EXPECT_EQ(MustParse("\"\\u0000\"").string_value(), std::string(1, '\0'));
}

TEST(JsonTest, InvalidUtf8IsRejectedByParseAndReplacedByDump) {
  EXPECT_THAT(ParseError("\"a\xFF\""), HasSubstr("invalid UTF-8 byte 0xff"));
  EXPECT_THAT(ParseError("\"\xC0\xAF\""), HasSubstr("invalid UTF-8"));      // overlong '/'
  EXPECT_THAT(ParseError("\"\xED\xA0\x80\""), HasSubstr("invalid UTF-8"));  // encoded surrogate
  EXPECT_EQ(Json(std::string("a\xFF"
                             "b"))
                .Dump(),
            "\"a\\ufffdb\"");
}

TEST(JsonTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(ParseError("{\n  \"a\": 1,\n  \"b\" 2\n}"),
            "invalid json at line 3, column 7: expected ':' after key \"b\", got '2'");
  EXPECT_EQ(ParseError("[1, 2"),
            "invalid json at line 1, column 6: expected ',' or ']' after an array item, got end "
            "of input");
  // Columns count characters, not bytes: "é" is one column.
  EXPECT_THAT(ParseError("[\"\xC3\xA9\", x]"), HasSubstr("line 1, column 7: expected a value"));
  EXPECT_THAT(ParseError(""), HasSubstr("line 1, column 1: expected a value, got end of input"));
  EXPECT_THAT(ParseError("{\"a\":1,}"), HasSubstr("column 8: expected a string key, got '}'"));
  EXPECT_THAT(ParseError("{\"a\":1} x"), HasSubstr("column 9: unexpected 'x' after the value"));
  EXPECT_THAT(ParseError("\n\n  tru"), HasSubstr("line 3, column 3: expected a value (true"));
}

TEST(JsonTest, RejectsWhatRfc8259Forbids) {
  EXPECT_THAT(ParseError("01"), HasSubstr("leading zeros"));
  EXPECT_THAT(ParseError("1."), HasSubstr("expected a digit after '.'"));
  EXPECT_THAT(ParseError("-"), HasSubstr("expected a digit in a number"));
  EXPECT_THAT(ParseError("1e"), HasSubstr("expected a digit in the exponent"));
  EXPECT_THAT(ParseError("+1"), HasSubstr("expected a value, got '+'"));
  EXPECT_THAT(ParseError("NaN"), HasSubstr("expected a value"));
  EXPECT_THAT(ParseError("1e400"), HasSubstr("number 1e400 is out of range"));
  EXPECT_THAT(ParseError("\"tab\there\""), HasSubstr("raw control character byte 0x09"));
  EXPECT_THAT(ParseError(R"("\x")"),
              HasSubstr("invalid escape in a string: backslash followed by 'x'"));
  EXPECT_THAT(ParseError(R"("\u12")"), HasSubstr("four hex digits"));
  EXPECT_THAT(ParseError(R"("\ud800")"), HasSubstr("high surrogate"));
  EXPECT_THAT(ParseError(R"("\udc00")"), HasSubstr("lone low surrogate"));
  EXPECT_THAT(ParseError("\"open"), HasSubstr("column 1: string is not closed"));
  EXPECT_THAT(ParseError("{'a': 1}"), HasSubstr("expected a string key, got '''"));
}

TEST(JsonTest, RejectsDuplicateKeysAtTheSecondOne) {
  EXPECT_EQ(ParseError("{\"a\": 1,\n \"a\": 2}"),
            "invalid json at line 2, column 2: duplicate key \"a\"");
}

TEST(JsonTest, RejectsNestingDeeperThanTheLimitWithoutCrashing) {
  const std::string ok = std::string(512, '[') + std::string(512, ']');
  EXPECT_TRUE(Json::Parse(ok).ok());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ParseError(deep), HasSubstr("nesting deeper than 512 levels"));
}

TEST(JsonTest, ParsesTwoHundredThousandKeysInLinearTime) {
  // Quadratic work (a linear search per key) takes minutes here and trips the test's timeout.
  std::string members;
  for (int i = 0; i < 200000; ++i) {
    members += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  }
  const Json top = MustParse("{" + members + "}");
  ASSERT_EQ(top.size(), 200000u);
  EXPECT_EQ(top.Find("k199999")->int_value(), 199999);
  const Json nested = MustParse("{\"m\":{" + members + "}}");
  EXPECT_EQ(nested.Find("m")->size(), 200000u);
  EXPECT_THAT(ParseError("{" + members + ",\"k0\":1}"), HasSubstr("duplicate key \"k0\""));
}

TEST(JsonTest, ReadsFiftyThousandDigitNumbersAndShortensThemInErrors) {
  const std::string digits(50000, '9');
  const Json j = MustParse("[0." + digits + ", 1" + std::string(50000, '0') + "e-50000, -" +
                           digits.substr(0, 300) + "]");
  EXPECT_EQ(j[0].number_value(), 1.0);
  EXPECT_EQ(j[1].number_value(), 1.0);
  EXPECT_EQ(j[2].number_value(), -1e300);
  EXPECT_FALSE(j[2].is_integer());
  const std::string message = ParseError(digits);  // beyond a double
  EXPECT_THAT(message, HasSubstr("number " + std::string(40, '9') + "... is out of range"));
  EXPECT_LT(message.size(), 120u);
}

TEST(JsonTest, SkipsAByteOrderMarkAndSurroundingWhitespace) {
  EXPECT_EQ(MustParse("\xEF\xBB\xBF \r\n\t{\"a\": 1}\n ").Find("a")->int_value(), 1);
}

TEST(JsonTest, GetReadsTypedValuesByPath) {
  Json j = MustParse(R"({"optimizer": {"lr": 0.5, "steps": 1e3, "name": "sgd", "nesterov": true},
                         "model": {"layers": [{"width": 64}, {"width": 32}]},
                         "dims": [2, 3], "tags": ["a", "b"]})");
  EXPECT_EQ(*j.Get<double>("optimizer.lr"), 0.5);
  EXPECT_EQ(*j.Get<int64_t>("optimizer.steps"), 1000);  // an integral double reads as integer
  EXPECT_EQ(*j.Get<int>("model.layers[1].width"), 32);
  EXPECT_EQ(*j.Get<std::string>("optimizer.name"), "sgd");
  EXPECT_TRUE(*j.Get<bool>("optimizer.nesterov"));
  EXPECT_EQ(*j.Get<std::vector<int64_t>>("dims"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*j.Get<std::vector<std::string>>("tags"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(j.Get<Json>("model.layers[0]")->Dump(), R"({"width":64})");
  EXPECT_EQ(*j.Get<double>("dims[0]"), 2.0);
  EXPECT_EQ(*MustParse("7").Get<int>(""), 7);
}

TEST(JsonTest, GetErrorsNameThePathAndWhatWasFound) {
  Json j = MustParse(R"({"optimizer": {"lr": "fast", "steps": 2.5, "big": 1e10},
                         "dims": [2, "x"], "n": 3})");
  Status s = j.Get<double>("optimizer.lr").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), R"(field "optimizer.lr": expected a number, got string "fast")");
  EXPECT_EQ(j.Get<int64_t>("optimizer.steps").status().message(),
            R"(field "optimizer.steps": expected an integer, got number 2.5)");
  EXPECT_THAT(j.Get<int>("optimizer.big").status().message(),
              HasSubstr("expected an integer in [-2147483648, 2147483647], got number 1e+10"));
  EXPECT_EQ(j.Get<std::vector<int64_t>>("dims").status().message(),
            R"(field "dims[1]": expected an integer, got string "x")");
  EXPECT_EQ(j.Get<std::string>("n.x").status().message(),
            R"(field "n": expected an object, got number 3)");
  EXPECT_EQ(j.Get<bool>("optimizer").status().message(),
            R"(field "optimizer": expected a bool, got object with 3 members)");
  EXPECT_EQ(j.Get<int>("dims[0].x").status().message(),
            R"(field "dims[0]": expected an object, got number 2)");
  EXPECT_EQ(MustParse("[1]").Get<int>("a").status().message(),
            "value: expected an object, got array of 1 items");
}

TEST(JsonTest, GetReportsMissingFieldsAsNotFound) {
  Json j = MustParse(R"({"optimizer": {"lr": 1}, "dims": [1]})");
  Status s = j.Get<double>("optimizer.momentum").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), R"(field "optimizer.momentum" is missing)");
  EXPECT_EQ(j.Get<double>("scheduler.warmup").status().message(),
            R"(field "scheduler" is missing)");
  EXPECT_EQ(j.Get<int>("dims[3]").status().message(),
            R"(field "dims[3]" is missing (the array has 1 items))");
}

TEST(JsonTest, GetOrFallsBackOnlyForMissingOrNull) {
  Json j = MustParse(R"({"a": null, "b": 2, "c": "x", "o": 1})");
  EXPECT_EQ(*j.GetOr<int64_t>("a", 7), 7);
  EXPECT_EQ(*j.GetOr<int64_t>("missing", 7), 7);
  EXPECT_EQ(*j.GetOr<int64_t>("b", 7), 2);
  EXPECT_EQ(*j.GetOr("nothing", "dflt"), "dflt");
  EXPECT_EQ(*j.GetOr("c", "dflt"), "x");
  EXPECT_EQ(j.GetOr<double>("c", 1.0).status().code(), StatusCode::kInvalidArgument);
  // A path through a value of the wrong kind is an error, not a fallback.
  EXPECT_EQ(j.GetOr<double>("o.lr", 1.0).status().message(),
            R"(field "o": expected an object, got number 1)");
}

TEST(JsonTest, EqualityComparesDeeplyAndNumbersByValue) {
  EXPECT_EQ(MustParse("[1, {\"a\": [true]}]"), MustParse("[1,{\"a\":[true]}]"));
  EXPECT_NE(MustParse("{\"a\":1,\"b\":2}"), MustParse("{\"b\":2,\"a\":1}"));  // order matters
  EXPECT_EQ(Json(2), Json(2.0));
  EXPECT_NE(Json(2), Json("2"));
  EXPECT_NE(Json(), Json(false));
}

TEST(JsonTest, LongStringsAreShortenedInErrors) {
  Json j = Json::Object({{"s", std::string(100, 'z')}});
  const std::string msg = j.Get<int>("s").status().message();
  EXPECT_THAT(msg, HasSubstr("got string \"" + std::string(37, 'z') + "...\""));
  EXPECT_LT(msg.size(), 120u);
}

TEST(JsonDeathTest, ReadingTheWrongKindIsABug) {
  EXPECT_DEATH((void)Json(1).string_value(), "string_value\\(\\) of a number");
  EXPECT_DEATH((void)Json(1.5).int_value(), "not an exact integer");
  EXPECT_DEATH(Json::Object({{"a", 1}, {"a", 2}}), "key \"a\" twice");
  EXPECT_DEATH(Json(1).Append(2), "Append\\(\\) on a number");
}

}  // namespace
}  // namespace trainyard
