// Softmax and log-softmax along one dim (float32/float64), as torch.softmax and
// torch.log_softmax. The kernels (kernels/cpu/softmax.h) work on the last dim; another dim is
// moved last and the result is returned as a view with x's dim order.
#pragma once

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

Tensor Softmax(const Tensor& x, int64_t dim);
Tensor LogSoftmax(const Tensor& x, int64_t dim);

}  // namespace trainyard::ops
