#include "client/spec_file.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

Json ParseOrDie(const std::string& text) {
  StatusOr<Json> json = Json::Parse(text);
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *json : Json();
}

TEST(SpecFileTest, SetsFieldFindsSnakeAndCamelCaseNamesButNotNull) {
  EXPECT_TRUE(
      SetsField(ParseOrDie(R"({"parallelism": {"world_size": 2}})"), "parallelism.world_size"));
  EXPECT_TRUE(
      SetsField(ParseOrDie(R"({"parallelism": {"worldSize": 1}})"), "parallelism.world_size"));
  EXPECT_TRUE(SetsField(ParseOrDie(R"({"batch_size": 8})"), "batch_size"));
  EXPECT_FALSE(
      SetsField(ParseOrDie(R"({"parallelism": {"world_size": null}})"), "parallelism.world_size"));
  EXPECT_FALSE(
      SetsField(ParseOrDie(R"({"parallelism": {"zero_stage": 1}})"), "parallelism.world_size"));
  EXPECT_FALSE(SetsField(ParseOrDie(R"({"parallelism": 3})"), "parallelism.world_size"));
  EXPECT_FALSE(SetsField(ParseOrDie(R"({})"), "parallelism.world_size"));
}

TEST(SpecFileTest, AnOverrideSetsAFieldAsTheFileWould) {
  Json json = ParseOrDie(R"({"steps": 10})");
  ASSERT_TRUE(ApplyOverride("parallelism.world_size=4", &json).ok());
  EXPECT_TRUE(SetsField(json, "parallelism.world_size"));
  EXPECT_EQ(*json.Find("parallelism")->Find("world_size"), Json(4));
}

}  // namespace
}  // namespace trainyard::client
