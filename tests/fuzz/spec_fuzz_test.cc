// The job-spec readers (client::ParseYaml, Json::Parse, client::ReadSpecFile) and the validator
// behind them (spec::ParseJobSpec), built from source with ASan and UBSan (tests/CMakeLists.txt):
// hostile inputs and seeded mutations of examples/ are read, or refused with InvalidArgument,
// never a crash, a hang or another status. A sanitizer report aborts the binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/spec_file.h"
#include "client/yaml.h"
#include "common/json.h"
#include "common/spec/job_spec.h"
#include "tests/fuzz/hostile_inputs.h"
#include "tests/fuzz/mutator.h"
#include "tests/testing/temp_dir.h"

namespace trainyard::fuzz {

// gtest names a failing case's parameter with this, not with its megabytes of text.
void PrintTo(const HostileInput& input, std::ostream* out) { *out << input.name; }

namespace {

using ::testing::HasSubstr;

// Mutants per reader: a few seconds each under the sanitizers on two cores.
constexpr uint64_t kSeed = 0x7e57'5bec'f022;
constexpr int kYamlMutants = 10000;
constexpr int kJsonMutants = 10000;

::testing::AssertionResult ReadOrRefused(const Status& status) {
  if (status.ok() || status.code() == StatusCode::kInvalidArgument) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected OK or INVALID_ARGUMENT, got " << status;
}

// ParseJobSpec accepts `json` (counted in `valid`) or refuses it with InvalidArgument; its
// Dump is JSON either way.
::testing::AssertionResult ValidatesCleanly(const Json& json, int* valid) {
  StatusOr<spec::JobSpec> spec = spec::ParseJobSpec(json);
  if (auto r = ReadOrRefused(spec.status()); !r) return r << " from ParseJobSpec";
  *valid += spec.ok();
  if (StatusOr<Json> again = Json::Parse(json.Dump(2)); !again.ok()) {
    return ::testing::AssertionFailure() << "Dump is not JSON: " << again.status();
  }
  return ::testing::AssertionSuccess();
}

// The start of `text`, escaped, for a failure message.
std::string Excerpt(const std::string& text) {
  std::string out = Json(text.substr(0, 400)).Dump();
  return text.size() > 400 ? out + " ... (" + std::to_string(text.size()) + " bytes)" : out;
}

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// examples/*.yaml and *.json, the hostile inputs' valid spec, and JSON renderings of the YAML.
struct Seeds {
  std::vector<std::string> yaml;
  std::vector<std::string> json;
};
Seeds LoadSeeds() {
  Seeds seeds;
  seeds.yaml.push_back(kValidSpecYaml);
  for (const auto& entry : std::filesystem::directory_iterator(TY_SOURCE_DIR "/examples")) {
    const std::string ext = entry.path().extension().string();
    if (ext == ".yaml") seeds.yaml.push_back(ReadText(entry.path()));
    if (ext == ".json") seeds.json.push_back(ReadText(entry.path()));
  }
  for (const std::string& yaml : seeds.yaml) {
    StatusOr<Json> json = client::ParseYaml(yaml, "seed.yaml");
    EXPECT_TRUE(json.ok()) << json.status();
    if (!json.ok()) continue;
    seeds.json.push_back(json->Dump());
    seeds.json.push_back(json->Dump(2));
  }
  return seeds;
}

void PrintSeed(const char* what, uint64_t seed, int mutants) {
  std::printf("%s: %d mutants from seed 0x%llx\n", what, mutants,
              static_cast<unsigned long long>(seed));
}

TEST(SpecFuzzTest, TheHostileInputsValidSpecIsValid) {
  StatusOr<Json> json = client::ParseYaml(kValidSpecYaml, "valid.yaml");
  ASSERT_TRUE(json.ok()) << json.status();
  StatusOr<spec::JobSpec> spec = spec::ParseJobSpec(*json);
  EXPECT_TRUE(spec.ok()) << spec.status();
}

TEST(SpecFuzzTest, YamlMutantsAreReadOrRefused) {
  const Seeds seeds = LoadSeeds();
  ASSERT_GE(seeds.yaml.size(), 5u) << "examples/ holds four YAML specs";
  std::vector<std::string> inputs = seeds.yaml;
  inputs.insert(inputs.end(), seeds.json.begin(), seeds.json.end());  // JSON is YAML too
  PrintSeed("ParseYaml", kSeed, kYamlMutants);
  Mutator mutator(kSeed);
  int read = 0, valid = 0;
  for (int i = 0; i < kYamlMutants; ++i) {
    const std::string text = mutator.Mutate(inputs[mutator.Below(inputs.size())], inputs);
    StatusOr<Json> json = client::ParseYaml(text, "mutant.yaml");
    ASSERT_TRUE(ReadOrRefused(json.status())) << "mutant " << i << ": " << Excerpt(text);
    if (!json.ok()) continue;
    ++read;
    ASSERT_TRUE(ValidatesCleanly(*json, &valid)) << "mutant " << i << ": " << Excerpt(text);
  }
  // Mutants that all fail to parse would test little beyond the parser's first error.
  EXPECT_GT(read, kYamlMutants / 10);
  EXPECT_GT(valid, kYamlMutants / 100);
  std::printf("ParseYaml read %d mutants (%d valid specs) and refused the rest\n", read, valid);
}

TEST(SpecFuzzTest, JsonMutantsAreReadOrRefusedAndDumpBackExactly) {
  const Seeds seeds = LoadSeeds();
  ASSERT_GE(seeds.json.size(), 10u);
  PrintSeed("Json::Parse", kSeed + 1, kJsonMutants);
  Mutator mutator(kSeed + 1);
  int read = 0, valid = 0;
  for (int i = 0; i < kJsonMutants; ++i) {
    const std::string text =
        mutator.Mutate(seeds.json[mutator.Below(seeds.json.size())], seeds.json);
    StatusOr<Json> json = Json::Parse(text);
    ASSERT_TRUE(ReadOrRefused(json.status())) << "mutant " << i << ": " << Excerpt(text);
    if (!json.ok()) continue;
    ++read;
    StatusOr<Json> again = Json::Parse(json->Dump());
    ASSERT_TRUE(again.ok() && *again == *json) << "mutant " << i << ": " << Excerpt(text);
    ASSERT_TRUE(ValidatesCleanly(*json, &valid)) << "mutant " << i << ": " << Excerpt(text);
  }
  EXPECT_GT(read, kJsonMutants / 20);  // JSON has less slack than YAML
  // Fewer than YAML's: half the seeds are examples/graph-*.yaml, whose nodes name each other,
  // so a mutation seldom leaves them valid.
  EXPECT_GT(valid, kJsonMutants / 200);
  std::printf("Json::Parse read %d mutants (%d valid specs) and refused the rest\n", read, valid);
}

// ---- The hostile inputs, one test each ----

class HostileInputTest : public ::testing::TestWithParam<HostileInput> {};

StatusOr<Json> Read(const HostileInput& input) {
  switch (input.reader) {
    case Reader::kYaml:
      return client::ParseYaml(input.text, "spec.yaml");
    case Reader::kJson:
      return Json::Parse(input.text);
    case Reader::kSpecFile:
      break;
  }
  testing::TempDir dir;
  std::ofstream(dir.File("spec.yaml"), std::ios::binary) << input.text;
  return client::ReadSpecFile(dir.File("spec.yaml"));
}

TEST_P(HostileInputTest, IsReadOrRefusedWithInvalidArgument) {
  const HostileInput& input = GetParam();
  StatusOr<Json> json = Read(input);
  if (!input.refusal.empty()) {
    ASSERT_FALSE(json.ok()) << "read " << Excerpt(json->Dump());
    EXPECT_EQ(json.status().code(), StatusCode::kInvalidArgument) << json.status();
    EXPECT_THAT(std::string(json.status().message()), HasSubstr(input.refusal));
    EXPECT_LT(json.status().message().size(), 300u) << "not a clear message";
    return;
  }
  ASSERT_TRUE(ReadOrRefused(json.status()));
  ASSERT_TRUE(json.ok()) << json.status();
  StatusOr<spec::JobSpec> spec = spec::ParseJobSpec(*json);
  ASSERT_TRUE(ReadOrRefused(spec.status()));
  if (!input.spec_refusal.empty()) {
    ASSERT_FALSE(spec.ok());
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(input.spec_refusal));
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, HostileInputTest, ::testing::ValuesIn(HostileInputs()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace trainyard::fuzz
