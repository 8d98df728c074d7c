#include "worker/nn/zoo.h"

namespace trainyard::nn {

std::vector<std::string> ModelNames() { return {"mlp", "cnn", "resnet", "gpt"}; }

StatusOr<std::shared_ptr<Module>> BuildModel(const std::string& name, const ModelConfigs& configs,
                                             Generator* gen) {
  if (name == "mlp") return BuildMlp(configs.mlp, gen);
  if (name == "cnn") return BuildCnn(configs.cnn, gen);
  if (name == "resnet") return BuildResNet(configs.resnet, gen);
  if (name == "gpt") return BuildGpt(configs.gpt, gen);
  std::string known;
  for (const std::string& n : ModelNames()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  return InvalidArgumentError("model \"" + name + "\" is not in the zoo; it must be one of " +
                              known);
}

}  // namespace trainyard::nn
