// The zoo's ResNet for small images: torchvision's ResNet-18 layout (BasicBlocks, batch norm,
// torchvision's names and initialisation) with a 3x3 stride-1 stem and no max-pool, as is
// usual for 32x32 inputs. It matches this PyTorch module, name for name:
//
//   class BasicBlock(nn.Module):  # torchvision.models.resnet.BasicBlock
//       def __init__(self, inplanes, planes, stride=1):
//           super().__init__()
//           self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
//           self.bn1 = nn.BatchNorm2d(planes)
//           self.relu = nn.ReLU(inplace=True)
//           self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
//           self.bn2 = nn.BatchNorm2d(planes)
//           self.downsample = None
//           if stride != 1 or inplanes != planes:
//               self.downsample = nn.Sequential(
//                   nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
//       def forward(self, x):
//           out = self.relu(self.bn1(self.conv1(x)))
//           out = self.bn2(self.conv2(out))
//           identity = x if self.downsample is None else self.downsample(x)
//           return self.relu(out + identity)
//
//   class ResNet(nn.Module):
//       def __init__(self, in_channels=3, num_classes=10, base_width=64, blocks=(2, 2, 2, 2)):
//           super().__init__()
//           w = base_width
//           self.conv1 = nn.Conv2d(in_channels, w, 3, 1, 1, bias=False)
//           self.bn1 = nn.BatchNorm2d(w)
//           self.relu = nn.ReLU(inplace=True)
//           inplanes = w
//           for i, n in enumerate(blocks):  # layer1 .. layer4
//               planes, stride = w * 2**i, (1 if i == 0 else 2)
//               layer = [BasicBlock(inplanes, planes, stride)]
//               layer += [BasicBlock(planes, planes) for _ in range(n - 1)]
//               setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
//               inplanes = planes
//           self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
//           self.fc = nn.Linear(w * 8, num_classes)
//           for m in self.modules():
//               if isinstance(m, nn.Conv2d):
//                   nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
//       def forward(self, x):
//           x = self.relu(self.bn1(self.conv1(x)))
//           x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
//           return self.fc(torch.flatten(self.avgpool(x), 1))
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/nn/conv.h"
#include "worker/nn/linear.h"
#include "worker/nn/module.h"
#include "worker/nn/norm.h"

namespace trainyard::nn {

struct ResNetConfig {
  int64_t in_channels = 3;  // at least 1
  int64_t num_classes = 10;
  // Stem width; layer i (0-based) has base_width * 2^i channels (torchvision: 64).
  int64_t base_width = 64;
  // BasicBlocks per stage: exactly 4 entries, each at least 1 ({2, 2, 2, 2} is ResNet-18).
  std::vector<int64_t> blocks = {2, 2, 2, 2};
};

// InvalidArgument naming the field ("resnet.blocks[2]"), its value and the allowed range.
Status Validate(const ResNetConfig& config);

class ResNet : public Module {
 public:
  // config must pass Validate (TY_CHECK). Weights are drawn from gen (the default generator
  // when null).
  ResNet(const ResNetConfig& config, Generator* gen);

  // x: (N, in_channels, H, W) -> logits (N, num_classes). In training, batch norm needs more
  // than one value per channel at every stage (CheckInput says so).
  Tensor Forward(const Tensor& x) override;
  Status CheckInput(const Tensor& x) const override;

  const ResNetConfig& config() const { return config_; }

 private:
  ResNetConfig config_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<Module>> layers_;
  std::shared_ptr<Module> avgpool_;
  std::shared_ptr<Linear> fc_;
};

StatusOr<std::shared_ptr<Module>> BuildResNet(const ResNetConfig& config, Generator* gen = nullptr);

}  // namespace trainyard::nn
