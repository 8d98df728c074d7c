// Optimizer: updates a fixed list of named parameters from their gradients, keeping per-parameter
// state (moments, momentum buffers, step counts) that can be saved and restored by name, so a
// run resumed from a checkpoint continues bit for bit.
//
// Parameters are contiguous leaves, float32 or float64 on the CPU and float32 on a GPU (the
// master weights under autocast); each name appears once.
// Step() runs under NoGradGuard and skips parameters whose grad is undefined (as PyTorch does):
// their state and step count stay as they were. Not thread-safe.
//
// Note [Optimizer state dict]
// StateDict() is a snapshot (deep copies), sorted by key, in the form nn::Module::StateDict()
// and SaveSafetensors use, of:
//   "<param>.step"         int64 scalar: updates applied to that parameter (absent until its first)
//   "<param>.<buffer>"     a tensor shaped and typed like the parameter: "exp_avg", "exp_avg_sq"
//                          (Adam, AdamW) or "momentum_buffer" (SGD with momentum)
//   "<hyperparameter>"     float64 scalar: "lr", "momentum", "beta1", ... (keys hold no '.')
// A parameter name may contain dots; the text after the last dot names the state.
// LoadStateDict() accepts exactly what StateDict() writes for the same parameter names and
// hyperparameter names (so Adam and AdamW states load into each other): it checks the
// hyperparameters as Create() does and every tensor against its parameter, and restores both;
// on any error nothing changes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::optim {

using NamedTensor = std::pair<std::string, Tensor>;

// One parameter's state: the updates applied so far and its buffers, by name. Empty (step 0, no
// buffers) until the parameter's first update.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter whose grad is defined.
  virtual void Step();
  // set_to_none: grads become undefined (the next backward allocates them); otherwise defined
  // grads are filled with zeros in place.
  void ZeroGrad(bool set_to_none = true);

  // The learning rate of the next Step(). set_lr takes a finite value >= 0 (TY_CHECK: schedules
  // and the trainer validate user settings before they reach it).
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;

  // "sgd", "adam", "adamw": the prefix of this optimizer's error messages.
  const std::string& name() const { return name_; }
  const std::vector<NamedTensor>& params() const { return params_; }
  const ParamState& state(size_t index) const { return states_.at(index); }

  // See Note [Optimizer state dict].
  std::vector<NamedTensor> StateDict() const;
  Status LoadStateDict(const std::vector<NamedTensor>& state);

 protected:
  // `params` must have passed CheckParams.
  Optimizer(std::string name, std::vector<NamedTensor> params);

  // InvalidArgument naming the parameter when `params` is empty or holds an undefined,
  // non-floating (float32 or float64; float32 on CUDA), non-contiguous, non-leaf or repeated tensor
  // or a repeated name.
  static Status CheckParams(const std::string& owner, const std::vector<NamedTensor>& params);

  // Updates `param` in place from `grad` (contiguous, same shape and dtype). `state.step`
  // already counts this update (1 on the first); buffers are created here on first use.
  virtual void Update(const Tensor& param, const Tensor& grad, ParamState& state) = 0;

  // One parameter's update within a Step().
  struct PendingUpdate {
    const Tensor* param;
    Tensor grad;  // contiguous
    ParamState* state;
  };
  // Applies the updates of one Step(), in parameter order. The default calls Update on each;
  // an optimizer with a multi-tensor kernel (Adam on CUDA) overrides it.
  virtual void UpdateAll(const std::vector<PendingUpdate>& updates);

  // The current hyperparameters, "lr" included; the key set is fixed per class.
  virtual std::map<std::string, double> Hyperparameters() const = 0;
  // Checks `h` (with the keys of Hyperparameters()) as Create() would, without changing
  // anything; returns the buffer names each stepped parameter holds under those settings.
  virtual StatusOr<std::vector<std::string>> CheckHyperparameters(
      const std::map<std::string, double>& h) const = 0;
  // Applies `h`, which CheckHyperparameters accepted.
  virtual void SetHyperparameters(const std::map<std::string, double>& h) = 0;

 private:
  Status SplitStateDict(const std::map<std::string, Tensor>& dict,
                        std::map<std::string, double>* hyper,
                        std::vector<std::map<std::string, Tensor>>* per_param) const;
  StatusOr<ParamState> ReadParamState(size_t index, const std::map<std::string, Tensor>& entries,
                                      const std::vector<std::string>& buffers) const;

  std::string name_;
  std::vector<NamedTensor> params_;
  std::map<std::string, size_t> index_;  // parameter name -> position in params_
  std::vector<ParamState> states_;       // parallel to params_
};

}  // namespace trainyard::optim
