#include "client/spec_file.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace trainyard::client {
namespace {

using ::testing::HasSubstr;

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

std::string WriteFile(const testing::TempDir& dir, const std::string& name,
                      const std::string& text) {
  const std::string path = dir.File(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// "steps: 1" padded with a comment to exactly `size` bytes.
std::string SpecOfSize(size_t size) {
  std::string text = "steps: 1\n#";
  return text + std::string(size - text.size(), 'x');
}

TEST(SpecFileTest, RefusesAFileOverOneMebibyteNamingThePathAndTheLimit) {
  testing::TempDir dir;
  for (const std::string name : {"big.yaml", "big.json"}) {
    const std::string path = WriteFile(dir, name, SpecOfSize(kMaxSpecFileBytes + 1));
    StatusOr<Json> json = ReadSpecFile(path);
    ASSERT_FALSE(json.ok());
    EXPECT_EQ(json.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(json.status().message()),
                HasSubstr("job spec " + path + " is larger than 1048576 bytes (1 MiB)"));
  }
}

TEST(SpecFileTest, ReadsAFileOfExactlyTheLimit) {
  testing::TempDir dir;
  StatusOr<Json> json = ReadSpecFile(WriteFile(dir, "max.yaml", SpecOfSize(kMaxSpecFileBytes)));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json->Find("steps"), Json(1));
}

TEST(SpecFileTest, StopsReadingAnEndlessFileAtTheLimit) {
  StatusOr<Json> json = ReadSpecFile("/dev/zero");
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(std::string(json.status().message()), HasSubstr("/dev/zero is larger than"));
}

TEST(SpecFileTest, ReadsASmallSpecFromAPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string text = "steps: 3\nname: piped\n";
  ASSERT_EQ(write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fds[1]);
  StatusOr<Json> json = ReadSpecFile("/dev/fd/" + std::to_string(fds[0]));  // like /dev/stdin
  close(fds[0]);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json->Find("steps"), Json(3));
  EXPECT_EQ(*json->Find("name"), Json("piped"));
}

TEST(SpecFileTest, NamesAFileItCannotRead) {
  testing::TempDir dir;
  StatusOr<Json> missing = ReadSpecFile(dir.File("missing.yaml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("opening job spec " + dir.File("missing.yaml")));
  StatusOr<Json> directory = ReadSpecFile(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(std::string(directory.status().message()),
              HasSubstr("reading job spec " + dir.path()));
}

TEST(SpecFileTest, NamesThePathInJsonSyntaxErrors) {
  testing::TempDir dir;
  StatusOr<Json> json = ReadSpecFile(WriteFile(dir, "bad.json", "{\"steps\": 1,}"));
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(std::string(json.status().message()),
              HasSubstr(dir.File("bad.json") + ": invalid json at line 1, column 13"));
}

}  // namespace
}  // namespace trainyard::client
