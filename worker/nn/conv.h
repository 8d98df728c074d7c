// nn.Conv2d: 2-D convolution over (N, C, H, W) or unbatched (C, H, W) inputs.
#pragma once

#include <cstdint>

#include "worker/nn/module.h"
#include "worker/ops/conv.h"
#include "worker/tensor/generator.h"

namespace trainyard::nn {

// Parameters "weight" (out, in / groups, kernel, kernel) and "bias" (out). Initialised as
// PyTorch: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in / groups * kernel^2, drawn from gen (the default generator when null).
// groups divides in_channels and out_channels (TY_CHECK).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, bool bias = true,
         Generator* gen = nullptr);

  // (N, in, H, W) -> (N, out, oH, oW); see ops::Conv2d for oH and oW.
  Tensor Forward(const Tensor& x) override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  const ops::Conv2dOptions& options() const { return options_; }

 private:
  Tensor weight_;
  Tensor bias_;
  ops::Conv2dOptions options_;
};

}  // namespace trainyard::nn
