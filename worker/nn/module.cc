#include "worker/nn/module.h"

#include <map>
#include <set>

#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"

namespace trainyard::nn {

namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string Describe(const Tensor& t) { return t.shape().ToString() + " " + DTypeName(t.dtype()); }

// Removes entries whose tensor appeared earlier in the list.
NamedTensors RemoveDuplicates(NamedTensors all) {
  std::set<const TensorImpl*> seen;
  NamedTensors out;
  for (auto& entry : all)
    if (seen.insert(entry.second.impl()).second) out.push_back(std::move(entry));
  return out;
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::Forward(const Tensor&) {
  TY_CHECK(false) << type_name_ << " has no Forward; call its children instead";
  return Tensor();
}

Status Module::CheckInput(const Tensor&) const { return OkStatus(); }

StatusOr<Tensor> Module::TryForward(const Tensor& x) {
  RETURN_IF_ERROR(CheckInput(x));
  return Forward(x);
}

void Module::CheckNewName(const std::string& name) const {
  TY_CHECK(!name.empty() && name.find('.') == std::string::npos)
      << type_name_ << ": name \"" << name << "\" must be non-empty and contain no '.'";
  bool taken = false;
  for (const auto& p : parameters_) taken |= p.first == name;
  for (const auto& b : buffers_) taken |= b.first == name;
  for (const auto& c : children_) taken |= c.first == name;
  TY_CHECK(!taken) << type_name_ << ": name \"" << name << "\" is already registered";
}

Tensor Module::RegisterParameter(const std::string& name, Tensor t) {
  CheckNewName(name);
  TY_CHECK(t.defined()) << type_name_ << ": parameter \"" << name << "\" is undefined";
  if (!t.requires_grad()) t.set_requires_grad(true);
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::RegisterBuffer(const std::string& name, Tensor t) {
  CheckNewName(name);
  TY_CHECK(t.defined()) << type_name_ << ": buffer \"" << name << "\" is undefined";
  buffers_.emplace_back(name, t);
  return t;
}

void Module::AddChild(const std::string& name, std::shared_ptr<Module> module) {
  CheckNewName(name);
  TY_CHECK(module != nullptr) << type_name_ << ": child \"" << name << "\" is null";
  children_.emplace_back(name, std::move(module));
}

void Module::CollectStateDict(const std::string& prefix, NamedTensors* out) const {
  for (const auto& [name, t] : parameters_) out->emplace_back(prefix + name, t);
  for (const auto& [name, t] : buffers_) out->emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->CollectStateDict(prefix + name + ".", out);
}

void Module::CollectParameters(const std::string& prefix, bool buffers, NamedTensors* out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_)
    out->emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_)
    child->CollectParameters(prefix + name + ".", buffers, out);
}

NamedTensors Module::NamedParameters() const {
  NamedTensors all;
  CollectParameters("", /*buffers=*/false, &all);
  return RemoveDuplicates(std::move(all));
}

NamedTensors Module::NamedBuffers() const {
  NamedTensors all;
  CollectParameters("", /*buffers=*/true, &all);
  return RemoveDuplicates(std::move(all));
}

NamedTensors Module::StateDict() const {
  NamedTensors out;
  CollectStateDict("", &out);
  return out;
}

std::vector<Tensor> Module::Parameters() const {
  std::vector<Tensor> out;
  for (auto& entry : NamedParameters()) out.push_back(std::move(entry.second));
  return out;
}

int64_t Module::NumParameters() const {
  int64_t n = 0;
  for (const Tensor& p : Parameters()) n += p.numel();
  return n;
}

void Module::Apply(const std::function<void(Module&)>& fn) {
  for (auto& entry : children_) entry.second->Apply(fn);
  fn(*this);
}

void Module::Train(bool on) {
  training_ = on;
  for (auto& entry : children_) entry.second->Train(on);
}

void Module::ZeroGrad(bool set_to_none) {
  for (const Tensor& p : Parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      ops::ZeroInPlace(g);
    }
  }
}

namespace {

// What loading `state` into a module whose state dict is `own` would do.
struct LoadPlan {
  std::vector<std::string> missing, unexpected, duplicates, mismatches;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
};

LoadPlan PlanLoad(const NamedTensors& own_list, const NamedTensors& state) {
  std::map<std::string, Tensor> own(own_list.begin(), own_list.end());
  LoadPlan plan;
  std::set<std::string> seen;
  std::set<const TensorImpl*> loaded;
  for (const auto& [name, src] : state) {
    if (!seen.insert(name).second) {
      plan.duplicates.push_back(name);
      continue;
    }
    auto it = own.find(name);
    if (it == own.end()) {
      plan.unexpected.push_back(name);
    } else if (!src.defined()) {
      plan.mismatches.push_back(name + " is undefined in the state dict");
    } else if (src.shape() != it->second.shape() || src.dtype() != it->second.dtype()) {
      plan.mismatches.push_back(name + " is " + Describe(src) + " in the state dict but " +
                                Describe(it->second) + " in the model");
    } else {
      plan.copies.emplace_back(it->second, src);
      loaded.insert(it->second.impl());
    }
  }
  for (const auto& [name, t] : own_list)
    if (!seen.count(name) && !loaded.count(t.impl())) plan.missing.push_back(name);
  return plan;
}

}  // namespace

Status Module::LoadStateDict(const NamedTensors& state, bool strict) {
  const LoadPlan plan = PlanLoad(StateDict(), state);
  std::vector<std::string> problems;
  if (strict && !plan.missing.empty()) problems.push_back("missing keys: " + Join(plan.missing));
  if (strict && !plan.unexpected.empty())
    problems.push_back("unexpected keys: " + Join(plan.unexpected));
  if (!plan.duplicates.empty()) problems.push_back("duplicate keys: " + Join(plan.duplicates));
  if (!plan.mismatches.empty()) problems.push_back("mismatched: " + Join(plan.mismatches));
  if (!problems.empty()) {
    std::string message = "loading a state dict into " + type_name_ + ": ";
    for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    return InvalidArgumentError(message);
  }
  NoGradGuard no_grad;
  for (const auto& [dst, src] : plan.copies) ops::CopyInPlace(dst, src);
  return OkStatus();
}

Status Module::To(Device device) {
  RETURN_IF_ERROR(CheckDeviceAvailable(device));
  for (const auto& [name, t] : StateDict()) MoveToDevice(t, device);
  return OkStatus();
}

Tensor Module::Call(const Tensor& x) {
  if (!wrapper_) return Forward(x);
  return wrapper_(x, [this](const Tensor& in) { return Forward(in); });
}

Tensor Module::Call(const Tensor& x, const Computation& forward) {
  return wrapper_ ? wrapper_(x, forward) : forward(x);
}

}  // namespace trainyard::nn
