#include "worker/trainer/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "tests/worker/trainer/trainer_test_util.h"

namespace trainyard::trainer {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

Manifest FullManifest() {
  Manifest m;
  m.state.step = 1200;
  m.state.epoch = 3;
  m.state.position = 4096;
  m.state.default_generator = {42, 81920};
  m.state.generators["dropout"] = {std::numeric_limits<uint64_t>::max(), 1};
  m.state.generators["data.augment"] = {0, uint64_t{1} << 63};
  m.state.world_size = 1;
  m.state.spec = Json::Object(
      {{"name", "fmnist-mlp"},
       {"optimizer", Json::Object({{"lr", 0.001}, {"betas", Json::Array({0.9, 0.95})}})},
       {"tags", Json::Array({"a", nullptr, true})}});
  m.state.saved_at = 1712345678.25;
  m.optimizer_file = kOptimizerFile;
  return m;
}

void ExpectSame(const Manifest& a, const Manifest& b) {
  EXPECT_EQ(a.state.step, b.state.step);
  EXPECT_EQ(a.state.epoch, b.state.epoch);
  EXPECT_EQ(a.state.position, b.state.position);
  EXPECT_EQ(a.state.default_generator, b.state.default_generator);
  EXPECT_EQ(a.state.generators, b.state.generators);
  EXPECT_EQ(a.state.world_size, b.state.world_size);
  EXPECT_EQ(a.state.spec, b.state.spec);
  EXPECT_EQ(a.state.saved_at, b.state.saved_at);
  EXPECT_EQ(a.model_file, b.model_file);
  EXPECT_EQ(a.optimizer_file, b.optimizer_file);
}

TEST(ManifestTest, RoundTripsEveryFieldThroughAFile) {
  TempDir tmp;
  const Manifest saved = FullManifest();
  ASSERT_TRUE(WriteManifest(tmp.File("manifest.json"), saved).ok());
  StatusOr<Manifest> loaded = ReadManifest(tmp.File("manifest.json"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSame(*loaded, saved);
}

TEST(ManifestTest, WritesSeedsAboveInt64AsDigitStringsAndSmallOnesAsNumbers) {
  const Json json = ManifestToJson(FullManifest());
  EXPECT_EQ(json.Find("generators")->Find("dropout")->Find("seed")->string_value(),
            "18446744073709551615");
  EXPECT_EQ(json.Find("generators")->Find("default")->Find("seed")->int_value(), 42);
  EXPECT_EQ(json.Find("generators")->Find("data.augment")->Find("offset")->string_value(),
            "9223372036854775808");
}

TEST(ManifestTest, ReadsAManifestWithoutOptimizerFileAsHavingNone) {
  Manifest m = FullManifest();
  m.optimizer_file.reset();
  Json json = ManifestToJson(m);
  EXPECT_TRUE(json.Find("optimizer_file")->is_null());
  StatusOr<Manifest> loaded = ManifestFromJson(json);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->optimizer_file.has_value());
}

TEST(ManifestTest, TheWritingAttemptRoundTripsAndOlderManifestsReadAsNone) {
  Manifest m = FullManifest();
  m.state.attempt = 7;
  Json json = ManifestToJson(m);
  EXPECT_EQ(json.Find("attempt")->int_value(), 7);
  StatusOr<Manifest> loaded = ManifestFromJson(json);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.attempt, 7);

  m.state.attempt = 0;  // outside the service, and manifests written before attempts
  json = ManifestToJson(m);
  EXPECT_EQ(json.Find("attempt"), nullptr);
  loaded = ManifestFromJson(json);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.attempt, 0);

  json.Set("attempt", -1);
  EXPECT_THAT(std::string(ManifestFromJson(json).status().message()),
              HasSubstr("field \"attempt\" is -1"));
}

// The manifest of FullManifest() with `key` set to `value`.
Status ReadWith(const std::string& key, Json value) {
  Json json = ManifestToJson(FullManifest());
  json.Set(key, std::move(value));
  return ManifestFromJson(json).status();
}

TEST(ManifestTest, RejectsBadFieldsNamingThem) {
  Status s = ReadWith("version", 2);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("unsupported checkpoint version 2"));
  s = ReadWith("format", "pytorch");
  EXPECT_THAT(s.message(), HasSubstr("field \"format\""));
  s = ReadWith("position", -1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("field \"position\" is -1"));
  s = ReadWith("world_size", 0);
  EXPECT_THAT(s.message(), HasSubstr("field \"world_size\" is 0"));
  s = ReadWith("model_file", "../other/model.safetensors");
  EXPECT_THAT(s.message(), HasSubstr("field \"model_file\""));
  s = ReadWith("generators",
               Json::Object({{"default", Json::Object({{"seed", -3}, {"offset", 0}})}}));
  EXPECT_THAT(s.message(), HasSubstr("field \"generators.default.seed\""));
  s = ReadWith("generators",
               Json::Object({{"dropout", Json::Object({{"seed", "1"}, {"offset", "2"}})}}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("generators.default"));
  s = ReadWith("generators", Json::Array({1, 2}));
  EXPECT_THAT(s.message(), HasSubstr("field \"generators\": expected an object"));
  EXPECT_EQ(ManifestFromJson(Json::Array({})).status().code(), StatusCode::kInvalidArgument);

  Json json = ManifestToJson(FullManifest());
  Json::Members members;
  for (const auto& member : json.members()) {
    if (member.first != "step") members.push_back(member);
  }
  s = ManifestFromJson(Json::Object(members)).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);  // a bad file, not a missing one
  EXPECT_THAT(s.message(), HasSubstr("field \"step\" is missing"));
}

TEST(ManifestTest, ReadErrorsNameThePath) {
  TempDir tmp;
  StatusOr<Manifest> m = ReadManifest(tmp.File("manifest.json"));
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr(tmp.File("manifest.json")));
  testing::WriteRaw(tmp.File("manifest.json"), "{\"step\": ");
  m = ReadManifest(tmp.File("manifest.json"));
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr(tmp.File("manifest.json")));
  EXPECT_THAT(m.status().message(), HasSubstr("invalid json"));
}

}  // namespace
}  // namespace trainyard::trainer
