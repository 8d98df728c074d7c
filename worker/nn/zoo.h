// The model zoo: build a model by name from plain config structs. Each model's header shows
// the PyTorch module it matches, so its StateDict() has torch's names, shapes and order:
//
//   name      config         model                       input -> output
//   "mlp"     MlpConfig      Mlp (mlp.h)                 (N, ...) float32 -> (N, classes)
//   "cnn"     CnnConfig      Cnn (cnn.h)                 (N, C, S, S) float32 -> (N, classes)
//   "resnet"  ResNetConfig   ResNet (resnet.h)           (N, C, H, W) float32 -> (N, classes)
//   "gpt"     GptConfig      Gpt (gpt.h), nanoGPT        (B, T) int64 -> (B, T, vocab)
//
//   nn::ModelConfigs configs;
//   configs.gpt.vocab_size = 65;
//   ASSIGN_OR_RETURN(std::shared_ptr<nn::Module> model, nn::BuildModel("gpt", configs));
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/nn/cnn.h"
#include "worker/nn/gpt.h"
#include "worker/nn/mlp.h"
#include "worker/nn/module.h"
#include "worker/nn/resnet.h"

namespace trainyard::nn {

// One config per zoo model; BuildModel reads only the one its name selects.
struct ModelConfigs {
  MlpConfig mlp;
  CnnConfig cnn;
  ResNetConfig resnet;
  GptConfig gpt;
};

// The names BuildModel accepts, in the order above.
std::vector<std::string> ModelNames();

// Validates the selected config and builds the model in training mode. Weights are drawn from
// gen, which also drives dropout and must outlive the model (the default generator when
// null), so a seeded generator fixes the model. InvalidArgument for an unknown name (listing
// the known ones) or a bad config field (naming it, e.g. "gpt.n_head").
StatusOr<std::shared_ptr<Module>> BuildModel(const std::string& name, const ModelConfigs& configs,
                                             Generator* gen = nullptr);

}  // namespace trainyard::nn
