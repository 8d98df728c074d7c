#include "worker/nn/init.h"

#include <algorithm>
#include <cmath>

#include "worker/tensor/factories.h"

namespace trainyard::nn::init {

Fans ComputeFans(const Tensor& t) {
  TY_CHECK(t.dim() >= 2) << "init: fan in and fan out need a tensor with at least 2 dims, got "
                         << t.shape();
  const int64_t receptive = t.numel() / std::max<int64_t>(1, t.size(0) * t.size(1));
  return Fans{t.size(1) * receptive, t.size(0) * receptive};
}

void Uniform(const Tensor& t, double lo, double hi, Generator* gen) {
  UniformInPlace(t, lo, hi, gen);
}

void Normal(const Tensor& t, double mean, double std, Generator* gen) {
  NormalInPlace(t, mean, std, gen);
}

void Constant(const Tensor& t, double value) { FillInPlace(t, value); }

void KaimingUniform(const Tensor& t, double a, Generator* gen) {
  const double gain = std::sqrt(2.0 / (1 + a * a));
  const double bound = std::sqrt(3.0) * gain / std::sqrt(static_cast<double>(ComputeFans(t).in));
  Uniform(t, -bound, bound, gen);
}

void KaimingNormal(const Tensor& t, FanMode mode, Generator* gen) {
  const Fans fans = ComputeFans(t);
  const double fan = static_cast<double>(mode == FanMode::kFanIn ? fans.in : fans.out);
  Normal(t, 0, std::sqrt(2.0) / std::sqrt(fan), gen);
}

}  // namespace trainyard::nn::init
