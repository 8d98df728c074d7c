// Helpers for the trainer tests: a temporary directory removed afterwards, file bytes, and a
// bit-for-bit tensor comparison.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/json.h"
#include "proto/job_spec.h"
#include "tests/testing/temp_dir.h"
#include "worker/tensor/tensor.h"

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

}  // namespace trainyard::trainer::testing
