// Pooling and reshaping layers without parameters: nn.MaxPool2d, nn.AvgPool2d,
// nn.AdaptiveAvgPool2d and nn.Flatten. Inputs are (N, C, H, W) or unbatched (C, H, W); see
// worker/ops/pool.h for the output sizes.
#pragma once

#include <cstdint>

#include "worker/nn/module.h"

namespace trainyard::nn {

// A stride of 0 means the kernel size (PyTorch's stride=None).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                     int64_t dilation = 1);
  Tensor Forward(const Tensor& x) override;

 private:
  int64_t kernel_, stride_, padding_, dilation_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                     bool count_include_pad = true);
  Tensor Forward(const Tensor& x) override;

 private:
  int64_t kernel_, stride_, padding_;
  bool count_include_pad_;
};

// Output (.., out_h, out_w) whatever the input's height and width.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(output_size, output_size) {}
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w);
  Tensor Forward(const Tensor& x) override;

 private:
  int64_t out_h_, out_w_;
};

// Merges dims start_dim..end_dim into one (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor Forward(const Tensor& x) override;

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace trainyard::nn
