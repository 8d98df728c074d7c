// Containers: nn.Sequential, nn.ModuleList and nn.ModuleDict. Children are named "0", "1", ...
// (Sequential, ModuleList) or by the given key (ModuleDict), so state dict names match
// PyTorch's ("layer1.0.conv1.weight", "transformer.h.3.attn.c_attn.bias").
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "worker/nn/module.h"

namespace trainyard::nn {

// Runs its children in order, each on the previous one's output. Empty: the identity.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  void Append(std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  const std::shared_ptr<Module>& at(size_t i) const;

  Tensor Forward(const Tensor& x) override;
};

// Holds modules under "0", "1", ...; has no Forward (its owner calls the children).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  explicit ModuleList(const std::vector<std::shared_ptr<Module>>& modules);

  void Append(std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  const std::shared_ptr<Module>& at(size_t i) const;
};

// Holds modules under given names in insertion order; has no Forward.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}

  template <typename M>
  std::shared_ptr<M> Insert(const std::string& name, std::shared_ptr<M> module) {
    return RegisterModule(name, std::move(module));
  }
  // The child called `name` (TY_CHECK that it exists).
  const std::shared_ptr<Module>& at(const std::string& name) const;
};

}  // namespace trainyard::nn
