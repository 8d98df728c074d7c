// Every job spec in examples/ reads and validates as it is: users copy them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "client/spec_file.h"

namespace trainyard::client {
namespace {

TEST(ExamplesTest, EverySpecInExamplesIsValid) {
  std::vector<std::string> specs;
  for (const auto& entry : std::filesystem::directory_iterator(TY_SOURCE_DIR "/examples")) {
    if (entry.path().extension() == ".yaml") specs.push_back(entry.path().string());
  }
  ASSERT_GE(specs.size(), 4u) << "examples/ holds the fashion, kjv and gpu specs";
  for (const std::string& path : specs) {
    StatusOr<spec::JobSpec> spec = LoadJobSpec(path, {});
    EXPECT_TRUE(spec.ok()) << path << ": " << spec.status();
  }
}

TEST(ExamplesTest, TheGpuExampleAsksForCudaInBf16) {
  StatusOr<spec::JobSpec> spec = LoadJobSpec(TY_SOURCE_DIR "/examples/kjv-gpt-gpu.yaml", {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device, "cuda");
  EXPECT_EQ(spec->precision, "bf16");
  EXPECT_EQ(spec->model.gpt.n_layer, 12);
}

}  // namespace
}  // namespace trainyard::client
