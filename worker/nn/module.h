// Module: the base of every layer and model, as torch.nn.Module. A module owns named
// parameters (leaf tensors that require grad), named buffers (state that is saved but not
// trained, e.g. batch-norm running statistics) and named child modules, each in registration
// order. Names compose with dots ("layer1.0.conv1.weight"), and the listings below follow
// PyTorch's order exactly, so a StateDict() matches torch's state_dict() name for name.
//
// Modules are held by std::shared_ptr: a parent shares ownership of its children, and the same
// Tensor handle (or child) may be registered in two places to tie weights. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::nn {

// (dotted name, tensor) in a defined order: PyTorch's OrderedDict state_dict as a vector.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  // type_name names the class in messages ("Linear", "GPT").
  explicit Module(std::string type_name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. Misuse (a wrong shape or dtype) fails a TY_CHECK; where x comes from
  // outside input, call TryForward instead. The default fails, naming the type: containers
  // such as ModuleList have no forward, as in PyTorch.
  virtual Tensor Forward(const Tensor& x);
  // Whether Forward accepts x; an InvalidArgument names the module, the shape and what is
  // allowed. The default accepts everything (the ops check).
  virtual Status CheckInput(const Tensor& x) const;
  // CheckInput, then Forward.
  StatusOr<Tensor> TryForward(const Tensor& x);

  // Registration. Names are non-empty, contain no '.', and are unique within the module
  // (TY_CHECK). Return what was registered, for keeping in a member.
  //
  // Sets requires_grad on t (a floating leaf). Registering a handle that another module also
  // registered ties the two: one tensor, listed under both names.
  Tensor RegisterParameter(const std::string& name, Tensor t);
  Tensor RegisterBuffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> RegisterModule(const std::string& name, std::shared_ptr<M> module) {
    AddChild(name, module);
    return module;
  }

  // Parameters of this module, then of each child recursively, with dotted names. A tensor
  // reachable under two names is listed once, under the first (torch's named_parameters()).
  NamedTensors NamedParameters() const;
  NamedTensors NamedBuffers() const;  // likewise for buffers
  // The module's own tensors (not copies; torch's state_dict(keep_vars=True)): per module its
  // parameters, then its buffers, then each child recursively. A tied tensor appears under
  // every name, as in PyTorch; see LoadStateDict for reading files that store it once.
  NamedTensors StateDict() const;
  std::vector<Tensor> Parameters() const;  // NamedParameters() without the names
  int64_t NumParameters() const;           // elements over Parameters()

  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // Calls fn on every child recursively, then on this module (torch's Module.apply).
  void Apply(const std::function<void(Module&)>& fn);

  // Training mode for this module and every descendant (on by default). It changes dropout
  // (active only in training) and batch norm (batch statistics and running-stat updates).
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter and buffer (with their gradients) to `device` in place, so handles
  // held by submodules and optimizers follow (torch's Module.to(device)). FailedPrecondition
  // where the device is not available; nothing moves then.
  Status To(Device device);

  // Drops every parameter's gradient (set_to_none, PyTorch's default), or zeroes it in place.
  void ZeroGrad(bool set_to_none = true);

  // Copies `state` into the module's existing tensors in place, under NoGradGuard, so tensors
  // held elsewhere (by an optimizer) see the new values. Every problem is reported in one
  // InvalidArgument: keys the module has but `state` lacks ("missing"), keys `state` has but
  // the module lacks ("unexpected"), duplicate keys, and shape or dtype mismatches. Missing
  // and unexpected keys are errors only when `strict`; mismatches always are. On error nothing
  // is copied. A missing key whose tensor is tied to a key that is present counts as loaded
  // (a file may store a tied weight once).
  Status LoadStateDict(const NamedTensors& state, bool strict = true);

  const std::string& type_name() const { return type_name_; }

  // Fully sharded data parallelism (ZeRO-3, worker/dist/fsdp.h) wraps each unit's forward: the
  // wrapper gets the input and the unit's computation and returns its output, gathering the
  // unit's parameters before and releasing them after. Models call their units (GPT blocks,
  // MLP layers) and the trainer its model through Call, so a wrapper set here takes effect.
  using Computation = std::function<Tensor(const Tensor&)>;
  using ForwardWrapper = std::function<Tensor(const Tensor& x, const Computation& forward)>;
  void set_forward_wrapper(ForwardWrapper wrapper) { wrapper_ = std::move(wrapper); }
  // Forward(x), through the wrapper when one is set.
  Tensor Call(const Tensor& x);
  // forward(x), this module's computation in another form (checkpointed), likewise.
  Tensor Call(const Tensor& x, const Computation& forward);

 private:
  void AddChild(const std::string& name, std::shared_ptr<Module> module);
  void CheckNewName(const std::string& name) const;
  // Appends this module's entries (and its children's) to out, names prefixed by `prefix`.
  void CollectStateDict(const std::string& prefix, NamedTensors* out) const;
  void CollectParameters(const std::string& prefix, bool buffers, NamedTensors* out) const;

  std::string type_name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  ForwardWrapper wrapper_;
};

}  // namespace trainyard::nn
