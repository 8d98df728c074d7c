// Helpers shared by the zoo's models (internal to worker/nn).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::nn::internal {

// InvalidArgument "<field> is <value>; it must be at least <min>" unless value >= min.
Status CheckAtLeast(const std::string& field, int64_t value, int64_t min);
// InvalidArgument "<field> is <value>; it must lie in [0, 1)" unless 0 <= value < 1.
Status CheckProbability(const std::string& field, double value);
// The most parameters a zoo model may have (40 GB of float32): a guard against configs whose
// sizes would overflow or exhaust memory.
constexpr double kMaxParameters = 1e10;
// InvalidArgument naming `model` and the fields to reduce unless count <= kMaxParameters.
// count is computed in double from the config, so it cannot overflow.
Status CheckParameterCount(const std::string& model, double count, const std::string& fields);
// InvalidArgument naming `model` unless x has `dtype`.
Status CheckDType(const std::string& model, const Tensor& x, DType dtype);
// InvalidArgument naming `model` unless x is float32 (N, channels, size, size), or with
// size 0, (N, channels, H, W) for any H, W >= 1.
Status CheckImage(const std::string& model, const Tensor& x, int64_t channels, int64_t size);

}  // namespace trainyard::nn::internal
