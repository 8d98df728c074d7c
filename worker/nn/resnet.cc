#include "worker/nn/resnet.h"

#include "worker/nn/containers.h"
#include "worker/nn/init.h"
#include "worker/nn/pooling.h"
#include "worker/nn/zoo_util.h"
#include "worker/ops/activation.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/views.h"

namespace trainyard::nn {

namespace {

constexpr int kStages = 4;

// torchvision's BasicBlock (see resnet.h): x (N, inplanes, H, W) -> (N, planes, H', W') with
// H' = H for stride 1 and floor((H - 1) / 2) + 1 for stride 2.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, Generator* gen)
      : Module("BasicBlock") {
    conv1_ = RegisterModule(
        "conv1", std::make_shared<Conv2d>(inplanes, planes, 3, stride, 1, 1, 1, false, gen));
    bn1_ = RegisterModule("bn1", std::make_shared<BatchNorm2d>(planes));
    conv2_ = RegisterModule("conv2",
                            std::make_shared<Conv2d>(planes, planes, 3, 1, 1, 1, 1, false, gen));
    bn2_ = RegisterModule("bn2", std::make_shared<BatchNorm2d>(planes));
    if (stride != 1 || inplanes != planes) {
      downsample_ = RegisterModule(
          "downsample",
          std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
              std::make_shared<Conv2d>(inplanes, planes, 1, stride, 0, 1, 1, false, gen),
              std::make_shared<BatchNorm2d>(planes)}));
    }
  }

  Tensor Forward(const Tensor& x) override {
    Tensor out = ops::Relu(bn1_->Forward(conv1_->Forward(x)));
    out = bn2_->Forward(conv2_->Forward(out));
    const Tensor identity = downsample_ ? downsample_->Forward(x) : x;
    return ops::Relu(ops::Add(out, identity));
  }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_;  // null when the shapes already agree
};

}  // namespace

Status Validate(const ResNetConfig& config) {
  RETURN_IF_ERROR(internal::CheckAtLeast("resnet.in_channels", config.in_channels, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("resnet.num_classes", config.num_classes, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("resnet.base_width", config.base_width, 1));
  if (config.blocks.size() != kStages) {
    return InvalidArgumentError("resnet.blocks has " + std::to_string(config.blocks.size()) +
                                " entries; it must have exactly 4 (one per stage)");
  }
  for (size_t i = 0; i < config.blocks.size(); ++i) {
    RETURN_IF_ERROR(
        internal::CheckAtLeast("resnet.blocks[" + std::to_string(i) + "]", config.blocks[i], 1));
  }
  // Stem, then per stage: the first block (with its downsample when the width changes), the
  // other blocks; then fc. A conv3x3 from a to b has 9ab weights, a batch norm 2b.
  const double w = static_cast<double>(config.base_width);
  double count = 9 * static_cast<double>(config.in_channels) * w + 2 * w, inplanes = w;
  for (int i = 0; i < kStages; ++i) {
    const double p = w * (1 << i);
    count += 9 * inplanes * p + 9 * p * p + 4 * p + (i > 0 ? inplanes * p + 2 * p : 0);
    count += static_cast<double>(config.blocks[i] - 1) * (18 * p * p + 4 * p);
    inplanes = p;
  }
  count += (inplanes + 1) * static_cast<double>(config.num_classes);
  return internal::CheckParameterCount("resnet", count,
                                       "resnet.base_width, resnet.blocks or resnet.num_classes");
}

ResNet::ResNet(const ResNetConfig& config, Generator* gen) : Module("ResNet"), config_(config) {
  const Status valid = Validate(config);
  TY_CHECK(valid.ok()) << valid.message();
  const int64_t w = config.base_width;
  conv1_ = RegisterModule(
      "conv1", std::make_shared<Conv2d>(config.in_channels, w, 3, 1, 1, 1, 1, false, gen));
  bn1_ = RegisterModule("bn1", std::make_shared<BatchNorm2d>(w));
  int64_t inplanes = w;
  for (int i = 0; i < kStages; ++i) {
    const int64_t planes = w << i;
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < config.blocks[i]; ++b) {
      const int64_t stride = (i > 0 && b == 0) ? 2 : 1;
      layer->Append(std::make_shared<BasicBlock>(b == 0 ? inplanes : planes, planes, stride, gen));
    }
    layers_.push_back(RegisterModule("layer" + std::to_string(i + 1), layer));
    inplanes = planes;
  }
  avgpool_ = RegisterModule("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  fc_ = RegisterModule("fc", std::make_shared<Linear>(inplanes, config.num_classes, true, gen));
  Apply([gen](Module& m) {
    if (auto* conv = dynamic_cast<Conv2d*>(&m)) {
      init::KaimingNormal(conv->weight(), init::FanMode::kFanOut, gen);
    }
  });
}

Status ResNet::CheckInput(const Tensor& x) const {
  RETURN_IF_ERROR(internal::CheckImage("resnet", x, config_.in_channels, 0));
  if (!is_training()) return OkStatus();
  // The smallest feature map is layer4's: three stride-2 convolutions (kernel 3, padding 1).
  int64_t h = x.size(2), wd = x.size(3);
  for (int i = 1; i < kStages; ++i) h = (h - 1) / 2 + 1, wd = (wd - 1) / 2 + 1;
  if (x.size(0) * h * wd > 1) return OkStatus();
  return InvalidArgumentError(
      "resnet: input shape is " + x.shape().ToString() +
      "; batch norm in training needs more than one value per channel, and layer4 would see " +
      std::to_string(x.size(0)) + "x" + std::to_string(h) + "x" + std::to_string(wd) +
      " (use a larger batch or image)");
}

Tensor ResNet::Forward(const Tensor& x) {
  const Status valid = CheckInput(x);
  TY_CHECK(valid.ok()) << valid.message();
  Tensor h = ops::Relu(bn1_->Forward(conv1_->Forward(x)));  // (N, w, H, W)
  for (const auto& layer : layers_) h = layer->Forward(h);  // (N, 8 w, ~H / 8, ~W / 8)
  return fc_->Forward(ops::Flatten(avgpool_->Forward(h), 1));
}

StatusOr<std::shared_ptr<Module>> BuildResNet(const ResNetConfig& config, Generator* gen) {
  RETURN_IF_ERROR(Validate(config));
  return std::shared_ptr<Module>(std::make_shared<ResNet>(config, gen));
}

}  // namespace trainyard::nn
