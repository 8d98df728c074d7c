// The zoo's multi-layer perceptron. It matches this PyTorch module, name for name:
//
//   class MLP(nn.Module):
//       def __init__(self, sizes, activation="relu", dropout=0.0):
//           super().__init__()
//           for i in range(len(sizes) - 1):  # fc1 .. fcN
//               setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))
//           self.act = {"relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh()}[activation]
//           self.dropout = nn.Dropout(dropout)
//           self.n = len(sizes) - 1
//       def forward(self, x):
//           x = x.flatten(1)
//           for i in range(1, self.n + 1):
//               x = getattr(self, f"fc{i}")(x)
//               if i < self.n:
//                   x = self.dropout(self.act(x))
//           return x
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/nn/dropout.h"
#include "worker/nn/linear.h"
#include "worker/nn/module.h"

namespace trainyard::nn {

struct MlpConfig {
  // Input features, hidden sizes..., classes: at least 2 entries, each at least 1.
  std::vector<int64_t> sizes = {784, 128, 10};
  std::string activation = "relu";  // relu | gelu (exact) | tanh
  double dropout = 0;               // after each hidden activation; in [0, 1)
};

// InvalidArgument naming the field ("mlp.sizes[1]"), its value and the allowed range.
Status Validate(const MlpConfig& config);

class Mlp : public Module {
 public:
  // config must pass Validate (TY_CHECK). Weights are drawn from gen, which also drives
  // dropout and must outlive the model (the default generator when null).
  Mlp(const MlpConfig& config, Generator* gen);

  // x: (N, ...) with sizes[0] elements per sample -> logits (N, sizes.back()).
  Tensor Forward(const Tensor& x) override;
  Status CheckInput(const Tensor& x) const override;

  const MlpConfig& config() const { return config_; }

 private:
  MlpConfig config_;
  std::vector<std::shared_ptr<Linear>> layers_;
  std::shared_ptr<Module> activation_;
  std::shared_ptr<Dropout> dropout_;
};

StatusOr<std::shared_ptr<Module>> BuildMlp(const MlpConfig& config, Generator* gen = nullptr);

}  // namespace trainyard::nn
