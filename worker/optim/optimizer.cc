#include "worker/optim/optimizer.h"

#include <set>

#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

constexpr char kStepKey[] = "step";

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

Status CheckParam(const std::string& owner, const std::string& name, const Tensor& t) {
  const std::string what = owner + ": parameter " + Quote(name);
  if (name.empty()) return InvalidArgumentError(owner + ": a parameter has an empty name");
  if (!t.defined()) return InvalidArgumentError(what + " is an undefined tensor");
  if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64) {
    return InvalidArgumentError(what + " is " + DTypeName(t.dtype()) +
                                "; optimizers update float32 or float64 parameters");
  }
  if (t.device().is_cuda() && t.dtype() != DType::kFloat32) {
    return InvalidArgumentError(what + " is " + DTypeName(t.dtype()) + " on " +
                                t.device().ToString() +
                                "; CUDA parameters are float32 (master weights under autocast)");
  }
  if (!t.is_contiguous()) {
    return InvalidArgumentError(what + " is not contiguous; pass the parameter, not a view");
  }
  if (!t.is_leaf()) {
    return InvalidArgumentError(what + " is not a leaf (it has a grad_fn); pass the parameter");
  }
  return OkStatus();
}

// A one-element tensor of `dtype`, or an error naming the entry.
Status CheckScalarEntry(const std::string& owner, const std::string& key, const Tensor& t,
                        DType dtype) {
  if (t.defined() && t.numel() == 1 && t.dtype() == dtype) return OkStatus();
  return InvalidArgumentError(owner + " state: " + Quote(key) + " must be a one-element " +
                              DTypeName(dtype) + " tensor");
}

StatusOr<int64_t> ReadStep(const std::string& owner, const std::string& key, const Tensor& t) {
  RETURN_IF_ERROR(CheckScalarEntry(owner, key, t, DType::kInt64));
  const int64_t step = ToVector<int64_t>(t)[0];
  if (step >= 1) return step;
  return InvalidArgumentError(owner + " state: " + Quote(key) + " is " + std::to_string(step) +
                              "; it must be at least 1");
}

// A buffer must match its parameter's dtype and shape (it is moved to the parameter's device:
// a checkpoint is read on the CPU).
Status CheckBuffer(const std::string& owner, const std::string& key, const Tensor& t,
                   const std::string& param_name, const Tensor& param) {
  if (t.defined() && t.dtype() == param.dtype() && t.shape() == param.shape()) return OkStatus();
  auto describe = [](const Tensor& x) {
    return std::string(DTypeName(x.dtype())) + " " + x.shape().ToString() + " on " +
           x.device().ToString();
  };
  return InvalidArgumentError(owner + " state: " + Quote(key) + " is " +
                              (t.defined() ? describe(t) : std::string("undefined")) +
                              "; parameter " + Quote(param_name) + " is " + describe(param));
}

}  // namespace

Optimizer::Optimizer(std::string name, std::vector<NamedTensor> params)
    : name_(std::move(name)), params_(std::move(params)), states_(params_.size()) {
  for (size_t i = 0; i < params_.size(); ++i) index_[params_[i].first] = i;
  TY_CHECK_EQ(index_.size(), params_.size()) << "optimizer parameters must pass CheckParams";
}

Status Optimizer::CheckParams(const std::string& owner, const std::vector<NamedTensor>& params) {
  if (params.empty()) return InvalidArgumentError(owner + ": the parameter list is empty");
  std::set<std::string> names;
  std::set<const TensorImpl*> tensors;
  for (const auto& [name, t] : params) {
    RETURN_IF_ERROR(CheckParam(owner, name, t));
    if (!names.insert(name).second) {
      return InvalidArgumentError(owner + ": parameter name " + Quote(name) + " appears twice");
    }
    if (!tensors.insert(t.impl()).second) {
      return InvalidArgumentError(owner + ": parameter " + Quote(name) +
                                  " is a tensor already listed under another name");
    }
  }
  return OkStatus();
}

void Optimizer::Step() {
  NoGradGuard no_grad;
  std::vector<PendingUpdate> pending;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i].second;
    const Tensor grad = param.grad();
    if (!grad.defined()) continue;
    ParamState& state = states_[i];
    ++state.step;
    pending.push_back(PendingUpdate{&param, ContiguousData(grad), &state});
  }
  UpdateAll(pending);
  for (const PendingUpdate& u : pending) u.param->BumpVersion();
}

void Optimizer::UpdateAll(const std::vector<PendingUpdate>& updates) {
  for (const PendingUpdate& u : updates) Update(*u.param, u.grad, *u.state);
}

void Optimizer::ZeroGrad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const auto& [name, param] : params_) {
    if (set_to_none) {
      param.set_grad(Tensor());
    } else if (Tensor grad = param.grad(); grad.defined()) {
      ops::ZeroInPlace(grad);
    }
  }
}

std::vector<NamedTensor> Optimizer::StateDict() const {
  std::map<std::string, Tensor> dict;
  for (const auto& [key, value] : Hyperparameters()) {
    dict[key] = Scalar(value, Options(DType::kFloat64));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& state = states_[i];
    if (state.step == 0) continue;
    const std::string& name = params_[i].first;
    dict[name + "." + kStepKey] = Scalar(static_cast<double>(state.step), Options(DType::kInt64));
    for (const auto& [buffer, t] : state.buffers) {
      dict[name + "." + buffer] = ConvertTo(t, t.dtype(), /*force_copy=*/true);
    }
  }
  return std::vector<NamedTensor>(dict.begin(), dict.end());
}

Status Optimizer::LoadStateDict(const std::vector<NamedTensor>& entries) {
  std::map<std::string, Tensor> dict;
  for (const auto& [key, t] : entries) {
    if (!dict.emplace(key, t).second) {
      return InvalidArgumentError(name_ + " state: " + Quote(key) + " appears twice");
    }
  }
  std::map<std::string, double> hyper;
  std::vector<std::map<std::string, Tensor>> per_param(params_.size());
  RETURN_IF_ERROR(SplitStateDict(dict, &hyper, &per_param));
  ASSIGN_OR_RETURN(const std::vector<std::string> buffers, CheckHyperparameters(hyper));
  std::vector<ParamState> states(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    ASSIGN_OR_RETURN(states[i], ReadParamState(i, per_param[i], buffers));
  }
  SetHyperparameters(hyper);
  states_ = std::move(states);
  return OkStatus();
}

// Hyperparameters (keys without a dot) go to `hyper`, the rest to the entry map of the
// parameter named before the last dot, keyed by the text after it.
Status Optimizer::SplitStateDict(const std::map<std::string, Tensor>& dict,
                                 std::map<std::string, double>* hyper,
                                 std::vector<std::map<std::string, Tensor>>* per_param) const {
  const std::map<std::string, double> expected = Hyperparameters();
  std::vector<std::string> expected_keys;
  for (const auto& [key, value] : expected) expected_keys.push_back(key);
  for (const auto& [key, t] : dict) {
    const size_t dot = key.rfind('.');
    if (dot == std::string::npos) {
      if (expected.count(key) == 0) {
        return InvalidArgumentError(name_ + " state: unknown hyperparameter " + Quote(key) + "; " +
                                    name_ + " has " + JoinKeys(expected_keys));
      }
      RETURN_IF_ERROR(CheckScalarEntry(name_, key, t, DType::kFloat64));
      (*hyper)[key] = t.item();
      continue;
    }
    const std::string param = key.substr(0, dot);
    auto it = index_.find(param);
    if (it == index_.end()) {
      return InvalidArgumentError(name_ + " state: " + Quote(key) + " belongs to parameter " +
                                  Quote(param) + ", which this optimizer does not have");
    }
    (*per_param)[it->second][key.substr(dot + 1)] = t;
  }
  for (const std::string& key : expected_keys) {
    if (hyper->count(key) == 0) {
      return InvalidArgumentError(name_ + " state: hyperparameter " + Quote(key) +
                                  " is missing (is this the state of another optimizer?)");
    }
  }
  return OkStatus();
}

StatusOr<ParamState> Optimizer::ReadParamState(size_t index,
                                               const std::map<std::string, Tensor>& entries,
                                               const std::vector<std::string>& buffers) const {
  ParamState state;
  if (entries.empty()) return state;  // never stepped
  const auto& [name, param] = params_[index];
  std::set<std::string> allowed(buffers.begin(), buffers.end());
  allowed.insert(kStepKey);
  for (const auto& [suffix, t] : entries) {
    if (allowed.count(suffix) == 0) {
      return InvalidArgumentError(
          name_ + " state: " + Quote(name + "." + suffix) + ": " + Quote(suffix) +
          " is not a state of " + name_ + " under these hyperparameters (expected " +
          JoinKeys(std::vector<std::string>(allowed.begin(), allowed.end())) + ")");
    }
  }
  for (const std::string& suffix : allowed) {
    const std::string key = name + "." + suffix;
    auto it = entries.find(suffix);
    if (it == entries.end()) {
      return InvalidArgumentError(name_ + " state: " + Quote(key) + " is missing");
    }
    if (suffix == kStepKey) {
      ASSIGN_OR_RETURN(state.step, ReadStep(name_, key, it->second));
    } else {
      RETURN_IF_ERROR(CheckBuffer(name_, key, it->second, name, param));
      state.buffers[suffix] = it->second.device() == param.device()
                                  ? ConvertTo(it->second, param.dtype(), /*force_copy=*/true)
                                  : CopyToDevice(it->second, param.device());
    }
  }
  return state;
}

}  // namespace trainyard::optim
