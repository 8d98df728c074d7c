// nn.Dropout: active only in training mode (Module::Train), the identity in eval.
#pragma once

#include "worker/nn/module.h"
#include "worker/tensor/generator.h"

namespace trainyard::nn {

// Zeroes each element with probability p in [0, 1] (TY_CHECK) and scales the rest by
// 1 / (1 - p). Masks are drawn from gen (the default generator when null), which must outlive
// the module.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor Forward(const Tensor& x) override;
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;  // not owned
};

}  // namespace trainyard::nn
