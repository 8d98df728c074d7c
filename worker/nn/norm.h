// Normalisation layers: nn.BatchNorm2d and nn.LayerNorm, with PyTorch's parameter and buffer
// names and initial values (weight 1, bias 0).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/nn/module.h"

namespace trainyard::nn {

// x: (N, C, H, W). Parameters "weight", "bias" (C); buffers "running_mean" (C, zeros),
// "running_var" (C, ones) and "num_batches_tracked" (int64, 0-dim). In training it normalises
// by the batch statistics, updates the running ones with `momentum` (running = (1 - momentum)
// running + momentum batch, unbiased variance) and adds 1 to num_batches_tracked; in eval it
// normalises by the running statistics and changes nothing.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);

  Tensor Forward(const Tensor& x) override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  int64_t num_batches_tracked() const { return ToVector<int64_t>(num_batches_tracked_)[0]; }

 private:
  double eps_, momentum_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

// Normalises over the trailing dims `normalized_shape`. Parameters "weight" (ones) and "bias"
// (zeros) of that shape when elementwise_affine; bias = false drops the bias (as nn.LayerNorm's
// bias argument and nanoGPT's LayerNorm(ndim, bias)).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, bool bias = true);

  Tensor Forward(const Tensor& x) override;

  const Tensor& weight() const { return weight_; }  // undefined without elementwise_affine
  const Tensor& bias() const { return bias_; }      // undefined without bias

 private:
  Shape shape_;
  double eps_;
  Tensor weight_, bias_;
};

}  // namespace trainyard::nn
