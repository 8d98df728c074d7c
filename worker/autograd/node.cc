#include "worker/autograd/node.h"

#include "kernels/cpu/elementwise.h"
#include "worker/autograd/accumulate_grad.h"
#include "worker/autograd/grad_mode.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard::autograd {
namespace {
thread_local uint64_t tl_next_sequence_nr = 0;
thread_local Status tl_backward_error;
}  // namespace

void SetBackwardError(Status status) {
  if (tl_backward_error.ok()) tl_backward_error = std::move(status);
}

Status TakeBackwardError() {
  Status s = std::move(tl_backward_error);
  tl_backward_error = Status();
  return s;
}

SavedTensor::SavedTensor(const Tensor& t, bool is_output)
    : tensor_(is_output && t.defined() ? t.detach() : t), version_(t.defined() ? t.version() : 0) {}

Node::~Node() {
  // Saved inputs hold their grad_fn too (the same nodes as edges_): drop them first so the
  // use_count test below sees the edge as the last owner.
  saved_.clear();
  pre_hooks_.clear();
  thread_local bool tl_deleting = false;
  thread_local std::vector<std::shared_ptr<Node>> tl_pending;
  for (size_t i = 0; i < edges_.size(); ++i) {
    if (edges_[i].fn && edges_[i].fn.use_count() == 1)
      tl_pending.push_back(std::move(edges_[i].fn));
  }
  if (tl_deleting) return;  // an outer destructor drains the list
  tl_deleting = true;
  while (!tl_pending.empty()) {
    std::shared_ptr<Node> n = std::move(tl_pending.back());
    tl_pending.pop_back();
    n.reset();  // may push its own children
  }
  tl_deleting = false;
}

Node::Node(uint32_t num_outputs) : num_outputs_(num_outputs), sequence_nr_(tl_next_sequence_nr++) {}

size_t Node::Save(const Tensor& t, bool is_output) {
  saved_.emplace_back(t, is_output);
  return saved_.size() - 1;
}

Status Node::CheckSaved() const {
  if (released_) {  // set only when there were saved tensors to free
    return FailedPreconditionError(
        std::string("trying to backward through the graph a second time: ") + name() +
        " has already freed its saved tensors; pass retain_graph=true to the first backward "
        "if you need to backward through the graph again");
  }
  for (size_t i = 0; i < saved_.size(); ++i) {
    const SavedTensor& s = saved_[i];
    if (s.defined() && s.tensor().version() != s.saved_version()) {
      return FailedPreconditionError(
          std::string("one of the tensors needed for gradient computation has been modified "
                      "by an in-place operation: tensor ") +
          std::to_string(i) + " saved by " + name() + " (shape " + s.tensor().shape().ToString() +
          ") is at version " + std::to_string(s.tensor().version()) + "; expected version " +
          std::to_string(s.saved_version()) +
          "; compute with a copy instead of changing it in place");
    }
  }
  return OkStatus();
}

void Node::ReleaseSaved() {
  if (saved_.empty()) return;
  saved_.clear();
  saved_.shrink_to_fit();
  released_ = true;
}

void Node::AddRetainGrad(uint32_t output_nr, const std::shared_ptr<TensorImpl>& tensor) {
  for (auto& r : retain_)
    if (r.first == output_nr && r.second.lock() == tensor) return;
  retain_.emplace_back(output_nr, tensor);
}

Status CheckHookResult(const Tensor& replaced, const Tensor& grad, const char* node) {
  if (replaced.shape() == grad.shape() && replaced.dtype() == grad.dtype()) return OkStatus();
  return InvalidArgumentError(std::string("a hook on a gradient flowing into ") + node +
                              " returned shape " + replaced.shape().ToString() + " " +
                              DTypeName(replaced.dtype()) + "; the gradient is " +
                              grad.shape().ToString() + " " + DTypeName(grad.dtype()));
}

void Node::RunPreHooks(GradList& grads) {
  for (auto& [nr, hook] : pre_hooks_) {
    if (!grads[nr].defined()) continue;
    Tensor replaced = hook(grads[nr]);
    if (!replaced.defined()) continue;
    Status s = CheckHookResult(replaced, grads[nr], name());
    if (!s.ok()) return SetBackwardError(s);
    grads[nr] = replaced;
  }
  for (auto& [nr, weak] : retain_) {
    std::shared_ptr<TensorImpl> impl = weak.lock();
    if (!impl || !grads[nr].defined()) continue;
    Tensor t(impl);
    Tensor g = t.grad();
    if (!g.defined()) {
      t.set_grad(ConvertTo(grads[nr], grads[nr].dtype(), /*force_copy=*/true));
    } else {
      AccumulateInto(g, grads[nr]);
      t.set_grad(g);
    }
  }
}

Edge GradientEdge(const Tensor& t) {
  if (!t.defined()) return Edge{};
  if (t.grad_fn()) return Edge{t.grad_fn(), t.output_nr()};
  if (t.requires_grad()) return Edge{GradAccumulator(t), 0};
  return Edge{};
}

bool ShouldRecord(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::IsEnabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool ShouldRecord(const std::vector<Tensor>& inputs) {
  if (!GradMode::IsEnabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void SetHistory(const Tensor& out, const std::shared_ptr<Node>& fn, uint32_t output_nr) {
  TensorImpl* impl = out.impl();
  TY_CHECK(impl->grad_fn == nullptr) << "SetHistory: tensor already has a grad_fn";
  impl->grad_fn = fn;
  impl->output_nr = output_nr;
  impl->requires_grad = true;
}

void AccumulateInto(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
    return;
  }
  TY_CHECK(slot.shape() == g.shape())
      << "gradient shapes differ: " << slot.shape() << " vs " << g.shape();
  // A sum we made ourselves and nobody else holds can take the next term in place.
  const bool exclusive = slot.impl_ptr().use_count() == 1 && slot.storage().use_count() == 1 &&
                         slot.is_contiguous() && !slot.requires_grad();
  Tensor out = exclusive ? slot : Empty(slot.shape(), slot.options());
  const int64_t* strides[3] = {out.strides().data(), slot.strides().data(), g.strides().data()};
  auto it = kernels::cpu::MakeIter(static_cast<int>(out.dim()), out.shape().data(), 3, strides);
  device::Binary(kernels::cpu::BinaryOp::kAdd, it, out, slot, g, 1);  // on the grads' device
  if (!exclusive) slot = out;
}

}  // namespace trainyard::autograd
