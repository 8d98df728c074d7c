// Weight initialisation as torch.nn.init: in-place fills that are not recorded by autograd.
// Random fills draw from `gen` (the default generator when null), so a seeded generator fixes
// the result.
#pragma once

#include <cstdint>

#include "worker/tensor/generator.h"
#include "worker/tensor/tensor.h"

namespace trainyard::nn::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field, where the receptive
// field is the product of the sizes after the first two (torch's
// _calculate_fan_in_and_fan_out). t has at least 2 dims (TY_CHECK).
struct Fans {
  int64_t in = 0;
  int64_t out = 0;
};
Fans ComputeFans(const Tensor& t);

void Uniform(const Tensor& t, double lo, double hi, Generator* gen = nullptr);  // U[lo, hi)
void Normal(const Tensor& t, double mean, double std, Generator* gen = nullptr);
void Constant(const Tensor& t, double value);
inline void Zeros(const Tensor& t) { Constant(t, 0); }
inline void Ones(const Tensor& t) { Constant(t, 1); }

// kaiming_uniform_(t, a, mode="fan_in", nonlinearity="leaky_relu"):
// U(-b, b) with b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in). With a = sqrt(5) (what
// nn.Linear and nn.Conv2d use) b is 1 / sqrt(fan_in).
void KaimingUniform(const Tensor& t, double a, Generator* gen = nullptr);

enum class FanMode { kFanIn, kFanOut };
// kaiming_normal_(t, mode, nonlinearity="relu"): N(0, 2 / fan), fan chosen by mode.
void KaimingNormal(const Tensor& t, FanMode mode, Generator* gen = nullptr);

}  // namespace trainyard::nn::init
