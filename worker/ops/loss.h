// Loss functions (float32/float64) as in torch.nn.functional. `reduction` is "none" (one loss
// per element), "sum" or "mean".
#pragma once

#include <string>

#include "worker/tensor/tensor.h"

namespace trainyard::ops {

struct CrossEntropyOptions {
  int64_t ignore_index = -100;  // targets equal to it add nothing and are not counted
  double label_smoothing = 0;   // in [0, 1]
  std::string reduction = "mean";
};

// torch.nn.functional.cross_entropy with class indices. logits: (N, C), (N, C, d1, ...) or
// (C); target: int64 of shape (N), (N, d1, ...) or (). "mean" divides by the number of
// targets that are not ignore_index (NaN when there are none). With label smoothing eps the
// loss is (1 - eps) * nll + eps * (-sum_c log p_c / C).
Tensor CrossEntropy(const Tensor& logits, const Tensor& target,
                    const CrossEntropyOptions& options = {});

// torch.nn.functional.mse_loss: (input - target)^2, input and target broadcast together.
Tensor MseLoss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");

}  // namespace trainyard::ops
