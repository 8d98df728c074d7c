#include "worker/nn/dropout.h"

#include "worker/ops/dropout.h"

namespace trainyard::nn {

Dropout::Dropout(double p, Generator* gen)
    : Module("Dropout"), p_(p), gen_(gen != nullptr ? gen : &DefaultGenerator()) {
  TY_CHECK(p >= 0 && p <= 1) << "Dropout: probability " << p << " must lie in [0, 1]";
}

Tensor Dropout::Forward(const Tensor& x) { return ops::Dropout(x, p_, is_training(), gen_); }

}  // namespace trainyard::nn
