// Node: one recorded operation in the backward graph (a tensor's grad_fn). Its edges point to
// the nodes that produced its inputs (or to AccumulateGrad nodes for leaves). Apply() maps the
// gradients of its outputs to gradients of its inputs (a vector-Jacobian product).
//
// Ownership: a tensor owns its grad_fn; a node owns the nodes its edges point to, so the graph
// lives as long as the outputs that can reach it. Saved tensors are held in `saved_`, checked
// against their version before Apply runs and released after it (unless retain_graph).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/small_vector.h"
#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::autograd {

class Node;

// A list of gradients, one per output (or per input); undefined entries mean zero.
using GradList = SmallVector<Tensor, 4>;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;  // which output of fn (which input slot of fn's Apply) this feeds
  bool valid() const { return fn != nullptr; }
};

// A tensor saved for backward, with the storage version at the time it was saved.
class SavedTensor {
 public:
  SavedTensor() = default;
  // Outputs of the saving node are detached to avoid a reference cycle through grad_fn.
  SavedTensor(const Tensor& t, bool is_output);
  const Tensor& tensor() const { return tensor_; }
  uint32_t saved_version() const { return version_; }
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(uint32_t num_outputs = 1);
  // Frees the nodes below iteratively, so dropping a long chain never recurses deeply.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MulBackward0" and the like, as PyTorch names them.
  virtual const char* name() const = 0;
  // grads: one per forward output. Returns one gradient per edge. Runs with grad mode off.
  virtual GradList Apply(GradList&& grads) = 0;

  const SmallVector<Edge, 2>& next_edges() const { return edges_; }
  void add_edge(Edge e) { edges_.push_back(std::move(e)); }
  uint32_t num_outputs() const { return num_outputs_; }
  void set_num_outputs(uint32_t n) { num_outputs_ = n; }
  // Ready nodes run highest first: the most recently created (PyTorch's order).
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Saves a tensor for backward; returns its index for saved(i).
  size_t Save(const Tensor& t, bool is_output = false);
  const Tensor& saved(size_t i) const { return saved_[i].tensor(); }
  // OK if every saved tensor is still at its saved version and not yet released.
  Status CheckSaved() const;
  // Drops saved tensors (after a backward without retain_graph).
  void ReleaseSaved();
  virtual bool is_accumulate_grad() const { return false; }

  // Hooks on the gradient of forward output `output_nr` (a non-leaf tensor's hooks).
  void AddPreHook(uint32_t output_nr, TensorHook hook) {
    pre_hooks_.emplace_back(output_nr, std::move(hook));
  }
  // Stores the gradient of output `output_nr` into `tensor`'s .grad (retain_grad()).
  void AddRetainGrad(uint32_t output_nr, const std::shared_ptr<TensorImpl>& tensor);
  bool has_pre_hooks() const { return !pre_hooks_.empty() || !retain_.empty(); }
  // Runs pre-hooks and retain_grad for the gradients about to enter Apply. A hook returning a
  // gradient of the wrong shape or dtype is reported through SetBackwardError.
  void RunPreHooks(GradList& grads);

 protected:
  void set_sequence_nr(uint64_t n) { sequence_nr_ = n; }

 private:
  SmallVector<Edge, 2> edges_;
  uint32_t num_outputs_;
  uint64_t sequence_nr_;
  std::vector<SavedTensor> saved_;
  bool released_ = false;
  std::vector<std::pair<uint32_t, TensorHook>> pre_hooks_;
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retain_;
};

// The edge a gradient for `t` flows along: its grad_fn, its leaf accumulator, or none.
Edge GradientEdge(const Tensor& t);

// True if grad mode is on and any of `inputs` requires grad.
bool ShouldRecord(std::initializer_list<const Tensor*> inputs);
bool ShouldRecord(const std::vector<Tensor>& inputs);

// Makes `out` output `output_nr` of `fn` (out must not already have a history).
void SetHistory(const Tensor& out, const std::shared_ptr<Node>& fn, uint32_t output_nr = 0);

// Creates node NodeT(args...) with edges to `inputs` (in order).
template <typename NodeT, typename... Args>
std::shared_ptr<NodeT> MakeNode(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  auto node = std::make_shared<NodeT>(std::forward<Args>(args)...);
  for (const Tensor* t : inputs) node->add_edge(GradientEdge(*t));
  return node;
}

// A node whose Apply meets bad input from user code (a custom function returning the wrong
// number or shape of gradients) reports it here; the engine turns it into the Status of the
// backward call. Thread-local; only the engine takes it.
void SetBackwardError(Status status);
Status TakeBackwardError();

// OK when a hook's replacement gradient has the gradient's shape and dtype.
Status CheckHookResult(const Tensor& replaced, const Tensor& grad, const char* node);

// Adds `g` into the gradient slot `slot` (out of place when the slot is already set).
void AccumulateInto(Tensor& slot, const Tensor& g);

}  // namespace trainyard::autograd
