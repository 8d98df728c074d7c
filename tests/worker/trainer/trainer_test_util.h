// Helpers for the trainer tests: a temporary directory removed afterwards, file bytes and a
// directory's names, a bit-for-bit tensor comparison, and the tiny GPT run of the device
// trainer tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/spec/job_spec.h"
#include "tests/testing/temp_dir.h"
#include "worker/tensor/tensor.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer::testing {

using ::trainyard::testing::TempDir;

inline void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "writing " << path;
}

// The bytes of `path`; empty when it cannot be read.
inline std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The names in `dir`, sorted.
inline std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A job spec from JSON text that must be valid (TY_CHECK).
inline spec::JobSpec ParseSpec(const std::string& json_text) {
  StatusOr<Json> json = Json::Parse(json_text);
  TY_CHECK(json.ok()) << json.status();
  StatusOr<spec::JobSpec> spec = spec::ParseJobSpec(*json);
  TY_CHECK(spec.ok()) << spec.status();
  return *spec;
}

inline bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor x = ContiguousData(a), y = ContiguousData(b);
  return std::memcmp(x.raw_data(), y.raw_data(), x.numel() * ElementSize(x.dtype())) == 0;
}

// The device trainer tests' corpus (host_backend_trainer_test.cc, cuda_emu_trainer_test.cc)
// written to `path`, and their tiny GPT on it: dropout, AdamW, clipping, `steps` steps; `extra`
// adds fields (say `, "device": "cuda"`).
inline void WriteGptCorpus(const std::string& path) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "In the beginning God created the heaven and the earth. ";
  WriteRaw(path, text);
}
inline spec::JobSpec DeviceGptSpec(const std::string& text_path, const std::string& extra,
                                   int64_t steps) {
  return ParseSpec(R"({"model": {"gpt": {"context": 16, "n_layer": 1, "n_head": 2,
                                          "n_embd": 16, "dropout": 0.1}},
    "data": {"text": {"path": ")" +
                   text_path + R"("}},
    "optimizer": {"adamw": {"lr": 0.01}}, "grad_clip_norm": 1.0, "batch_size": 4,
    "steps": )" + std::to_string(steps) +
                   R"(, "seed": 3, "eval": {"max_batches": 2})" + extra + "}");
}

// Trains `spec` to its end (EXPECTing it to succeed) and returns every step's metrics; the
// summary too where `summary` is given.
inline std::vector<StepMetrics> TrainToEnd(const spec::JobSpec& spec,
                                           TrainSummary* summary = nullptr) {
  std::vector<StepMetrics> steps;
  TrainerOptions options;
  options.on_step = [&](const StepMetrics& m) { steps.push_back(m); };
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return steps;
  StatusOr<TrainSummary> result = (*trainer)->Run();
  EXPECT_TRUE(result.ok()) << result.status();
  if (summary != nullptr && result.ok()) *summary = *result;
  return steps;
}

}  // namespace trainyard::trainer::testing
