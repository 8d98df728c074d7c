#include "worker/nn/containers.h"

namespace trainyard::nn {

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) : Module("Sequential") {
  for (const auto& m : modules) Append(m);
}

void Sequential::Append(std::shared_ptr<Module> module) {
  RegisterModule(std::to_string(size()), std::move(module));
}

const std::shared_ptr<Module>& Sequential::at(size_t i) const {
  TY_CHECK(i < size()) << "Sequential: index " << i << " is out of range for " << size()
                       << " modules";
  return named_children()[i].second;
}

Tensor Sequential::Forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& entry : named_children()) y = entry.second->Forward(y);
  return y;
}

ModuleList::ModuleList(const std::vector<std::shared_ptr<Module>>& modules) : Module("ModuleList") {
  for (const auto& m : modules) Append(m);
}

void ModuleList::Append(std::shared_ptr<Module> module) {
  RegisterModule(std::to_string(size()), std::move(module));
}

const std::shared_ptr<Module>& ModuleList::at(size_t i) const {
  TY_CHECK(i < size()) << "ModuleList: index " << i << " is out of range for " << size()
                       << " modules";
  return named_children()[i].second;
}

const std::shared_ptr<Module>& ModuleDict::at(const std::string& name) const {
  for (const auto& entry : named_children())
    if (entry.first == name) return entry.second;
  TY_CHECK(false) << "ModuleDict: no module called \"" << name << "\"";
  return named_children().front().second;
}

}  // namespace trainyard::nn
