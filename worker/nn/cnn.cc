#include "worker/nn/cnn.h"

#include "worker/nn/zoo_util.h"
#include "worker/ops/activation.h"
#include "worker/ops/views.h"

namespace trainyard::nn {

Status Validate(const CnnConfig& config) {
  RETURN_IF_ERROR(internal::CheckAtLeast("cnn.in_channels", config.in_channels, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("cnn.image_size", config.image_size, 4));
  RETURN_IF_ERROR(internal::CheckAtLeast("cnn.num_classes", config.num_classes, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("cnn.channels1", config.channels1, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("cnn.channels2", config.channels2, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("cnn.hidden", config.hidden, 1));
  RETURN_IF_ERROR(internal::CheckProbability("cnn.dropout", config.dropout));
  const double in = config.in_channels, c1 = config.channels1, c2 = config.channels2;
  const double side = config.image_size / 2 / 2, hidden = config.hidden;
  const double count = c1 * (in * 9 + 1) + c2 * (c1 * 9 + 1) + hidden * (c2 * side * side + 1) +
                       static_cast<double>(config.num_classes) * (hidden + 1);
  return internal::CheckParameterCount(
      "cnn", count, "cnn.image_size, cnn.channels1, cnn.channels2 or cnn.hidden");
}

Cnn::Cnn(const CnnConfig& config, Generator* gen) : Module("CNN"), config_(config) {
  const Status valid = Validate(config);
  TY_CHECK(valid.ok()) << valid.message();
  const CnnConfig& c = config;
  conv1_ =
      RegisterModule("conv1", std::make_shared<Conv2d>(c.in_channels, c.channels1, 3, 1, 1, 1, 1,
                                                       /*bias=*/true, gen));
  conv2_ = RegisterModule(
      "conv2", std::make_shared<Conv2d>(c.channels1, c.channels2, 3, 1, 1, 1, 1, true, gen));
  pool_ = RegisterModule("pool", std::make_shared<MaxPool2d>(2));
  const int64_t side = c.image_size / 2 / 2;
  fc1_ = RegisterModule("fc1",
                        std::make_shared<Linear>(c.channels2 * side * side, c.hidden, true, gen));
  dropout_ = RegisterModule("dropout", std::make_shared<Dropout>(c.dropout, gen));
  fc2_ = RegisterModule("fc2", std::make_shared<Linear>(c.hidden, c.num_classes, true, gen));
}

Status Cnn::CheckInput(const Tensor& x) const {
  return internal::CheckImage("cnn", x, config_.in_channels, config_.image_size);
}

Tensor Cnn::Forward(const Tensor& x) {
  const Status valid = CheckInput(x);
  TY_CHECK(valid.ok()) << valid.message();
  Tensor h = pool_->Forward(ops::Relu(conv1_->Forward(x)));  // (N, channels1, S/2, S/2)
  h = pool_->Forward(ops::Relu(conv2_->Forward(h)));         // (N, channels2, S/4, S/4)
  h = ops::Flatten(h, 1);
  h = dropout_->Forward(ops::Relu(fc1_->Forward(h)));  // (N, hidden)
  return fc2_->Forward(h);                             // (N, num_classes)
}

StatusOr<std::shared_ptr<Module>> BuildCnn(const CnnConfig& config, Generator* gen) {
  RETURN_IF_ERROR(Validate(config));
  return std::shared_ptr<Module>(std::make_shared<Cnn>(config, gen));
}

}  // namespace trainyard::nn
