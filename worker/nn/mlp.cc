#include "worker/nn/mlp.h"

#include <algorithm>

#include "worker/nn/activation.h"
#include "worker/nn/zoo_util.h"
#include "worker/ops/views.h"

namespace trainyard::nn {

Status Validate(const MlpConfig& config) {
  if (config.sizes.size() < 2) {
    return InvalidArgumentError("mlp.sizes has " + std::to_string(config.sizes.size()) +
                                " entries; it needs at least 2 (input and output sizes)");
  }
  for (size_t i = 0; i < config.sizes.size(); ++i) {
    RETURN_IF_ERROR(
        internal::CheckAtLeast("mlp.sizes[" + std::to_string(i) + "]", config.sizes[i], 1));
  }
  const std::string& a = config.activation;
  if (a != "relu" && a != "gelu" && a != "tanh") {
    return InvalidArgumentError("mlp.activation is \"" + a +
                                "\"; it must be \"relu\", \"gelu\" or \"tanh\"");
  }
  RETURN_IF_ERROR(internal::CheckProbability("mlp.dropout", config.dropout));
  double count = 0;
  for (size_t i = 0; i + 1 < config.sizes.size(); ++i)
    count += (static_cast<double>(config.sizes[i]) + 1) * static_cast<double>(config.sizes[i + 1]);
  return internal::CheckParameterCount("mlp", count, "mlp.sizes");
}

namespace {

std::shared_ptr<Module> MakeActivation(const std::string& name) {
  if (name == "gelu") return std::make_shared<GELU>();
  if (name == "tanh") return std::make_shared<Tanh>();
  return std::make_shared<ReLU>();
}

}  // namespace

Mlp::Mlp(const MlpConfig& config, Generator* gen) : Module("MLP"), config_(config) {
  const Status valid = Validate(config);
  TY_CHECK(valid.ok()) << valid.message();
  for (size_t i = 0; i + 1 < config.sizes.size(); ++i) {
    layers_.push_back(
        RegisterModule("fc" + std::to_string(i + 1),
                       std::make_shared<Linear>(config.sizes[i], config.sizes[i + 1], true, gen)));
  }
  activation_ = RegisterModule("act", MakeActivation(config.activation));
  dropout_ = RegisterModule("dropout", std::make_shared<Dropout>(config.dropout, gen));
}

Status Mlp::CheckInput(const Tensor& x) const {
  const int64_t features = x.dim() >= 2 ? x.numel() / std::max<int64_t>(1, x.size(0)) : -1;
  if (x.dim() < 2 || (x.size(0) > 0 && features != config_.sizes[0])) {
    return InvalidArgumentError("mlp: input shape is " + x.shape().ToString() +
                                "; it must be (N, ...) with " + std::to_string(config_.sizes[0]) +
                                " elements per sample (mlp.sizes[0])");
  }
  return internal::CheckDType("mlp", x, DType::kFloat32);
}

Tensor Mlp::Forward(const Tensor& x) {
  const Status valid = CheckInput(x);
  TY_CHECK(valid.ok()) << valid.message();
  Tensor h = ops::Reshape(x, {x.size(0), config_.sizes[0]});
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i]->Call(h);
    if (i + 1 < layers_.size()) h = dropout_->Forward(activation_->Forward(h));
  }
  return h;
}

StatusOr<std::shared_ptr<Module>> BuildMlp(const MlpConfig& config, Generator* gen) {
  RETURN_IF_ERROR(Validate(config));
  return std::shared_ptr<Module>(std::make_shared<Mlp>(config, gen));
}

}  // namespace trainyard::nn
