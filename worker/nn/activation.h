// Activation layers without parameters: nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid, nn.SiLU.
// Each applies its op (worker/ops/activation.h) elementwise; any shape.
#pragma once

#include <string>

#include "worker/nn/module.h"

namespace trainyard::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor Forward(const Tensor& x) override;
};

// approximate: "none" (exact, with erf; nn.GELU()'s default) or "tanh" (TY_CHECK).
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor Forward(const Tensor& x) override;

 private:
  std::string approximate_;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor Forward(const Tensor& x) override;
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor Forward(const Tensor& x) override;
};

class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor Forward(const Tensor& x) override;
};

}  // namespace trainyard::nn
