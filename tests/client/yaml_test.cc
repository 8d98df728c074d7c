#include "client/yaml.h"

#include <cmath>

#include "client/spec_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

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
  EXPECT_THAT(YamlError("a: !!int abc\n"), HasSubstr("spec.yaml:1:4: \"abc\" is not a valid !!int"));
}

TEST(YamlTest, ErrorsNameTheLineAndColumn) {
  EXPECT_THAT(YamlError("a: 1\nb: [1, 2\n"), HasSubstr("spec.yaml:"));
  EXPECT_THAT(YamlError("a: 1\na: 2\n"), HasSubstr("spec.yaml:2:1: duplicate key \"a\""));
  EXPECT_THAT(YamlError(""), HasSubstr("empty"));
  EXPECT_THAT(YamlError("a: 1\n---\nb: 2\n"), HasSubstr("second document"));
  EXPECT_THAT(YamlError("? [1, 2]\n: x\n"), HasSubstr("key must be a scalar"));
  EXPECT_THAT(YamlError("a: *nope\n"), HasSubstr("spec.yaml"));
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
  EXPECT_THAT(std::string(ApplyOverride("steps.x=1", &j).message()), HasSubstr("steps is not a mapping"));
  EXPECT_THAT(std::string(ApplyOverride("a..b=1", &j).message()), HasSubstr("empty field name"));
}

}  // namespace
}  // namespace trainyard::client
