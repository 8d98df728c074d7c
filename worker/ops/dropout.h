// Dropout (float32/float64) as torch.nn.functional.dropout.
#pragma once

#include "worker/tensor/generator.h"
#include "worker/tensor/tensor.h"

namespace trainyard::ops {

// Zeroes each element with probability p and scales the rest by 1 / (1 - p). The mask is
// drawn from `gen` (the default generator when null): the same generator state gives the same
// mask. Returns x itself when p == 0 or not training; p == 1 gives zeros.
Tensor Dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace trainyard::ops
