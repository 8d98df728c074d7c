// The zoo's small convolutional network for MNIST-like images. It matches this PyTorch
// module, name for name:
//
//   class CNN(nn.Module):
//       def __init__(self, in_channels=1, image_size=28, num_classes=10, channels1=32,
//                    channels2=64, hidden=128, dropout=0.25):
//           super().__init__()
//           self.conv1 = nn.Conv2d(in_channels, channels1, 3, padding=1)
//           self.conv2 = nn.Conv2d(channels1, channels2, 3, padding=1)
//           self.pool = nn.MaxPool2d(2)
//           side = image_size // 2 // 2
//           self.fc1 = nn.Linear(channels2 * side * side, hidden)
//           self.dropout = nn.Dropout(dropout)
//           self.fc2 = nn.Linear(hidden, num_classes)
//       def forward(self, x):
//           x = self.pool(F.relu(self.conv1(x)))
//           x = self.pool(F.relu(self.conv2(x)))
//           x = torch.flatten(x, 1)
//           x = self.dropout(F.relu(self.fc1(x)))
//           return self.fc2(x)
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "worker/nn/conv.h"
#include "worker/nn/dropout.h"
#include "worker/nn/linear.h"
#include "worker/nn/module.h"
#include "worker/nn/pooling.h"

namespace trainyard::nn {

struct CnnConfig {
  int64_t in_channels = 1;  // at least 1
  int64_t image_size = 28;  // height = width, at least 4 (two 2x2 poolings)
  int64_t num_classes = 10;
  int64_t channels1 = 32;  // conv1 output channels
  int64_t channels2 = 64;  // conv2 output channels
  int64_t hidden = 128;    // fc1 output features
  double dropout = 0.25;   // after fc1's relu; in [0, 1)
};

// InvalidArgument naming the field ("cnn.image_size"), its value and the allowed range.
Status Validate(const CnnConfig& config);

class Cnn : public Module {
 public:
  // config must pass Validate (TY_CHECK). Weights are drawn from gen, which also drives
  // dropout and must outlive the model (the default generator when null).
  Cnn(const CnnConfig& config, Generator* gen);

  // x: (N, in_channels, image_size, image_size) -> logits (N, num_classes).
  Tensor Forward(const Tensor& x) override;
  Status CheckInput(const Tensor& x) const override;

  const CnnConfig& config() const { return config_; }

 private:
  CnnConfig config_;
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<MaxPool2d> pool_;
  std::shared_ptr<Linear> fc1_, fc2_;
  std::shared_ptr<Dropout> dropout_;
};

StatusOr<std::shared_ptr<Module>> BuildCnn(const CnnConfig& config, Generator* gen = nullptr);

}  // namespace trainyard::nn
