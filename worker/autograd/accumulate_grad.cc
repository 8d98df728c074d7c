#include "worker/autograd/accumulate_grad.h"

#include "kernels/cpu/elementwise.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard::autograd {
namespace {

// leaf_grad += g, in place (keeps .grad's storage, which may be a view owned by someone else).
void AddInPlace(const Tensor& leaf_grad, const Tensor& g) {
  const int64_t* strides[3] = {leaf_grad.strides().data(), leaf_grad.strides().data(),
                               g.strides().data()};
  auto it = kernels::cpu::MakeIter(static_cast<int>(leaf_grad.dim()), leaf_grad.shape().data(), 3,
                                   strides);
  device::Binary(kernels::cpu::BinaryOp::kAdd, it, leaf_grad, leaf_grad, g, 1);
  leaf_grad.BumpVersion();
}

}  // namespace

Status AccumulateGrad::RunLeafHooks(Tensor& g) {
  if (!leaf_->meta) return OkStatus();
  for (auto& hook : leaf_->meta->hooks) {
    Tensor replaced = hook(g);
    if (!replaced.defined()) continue;
    RETURN_IF_ERROR(CheckHookResult(replaced, g, name()));
    g = replaced;
  }
  return OkStatus();
}

GradList AccumulateGrad::Apply(GradList&& grads) {
  Tensor g = std::move(grads[0]);
  Tensor leaf(leaf_);
  if (!g.defined()) return {};
  std::lock_guard<std::mutex> lock(mu_);
  Status hooks = RunLeafHooks(g);
  if (!hooks.ok()) {
    SetBackwardError(hooks);
    return {};
  }
  TY_CHECK(g.shape() == leaf.shape()) << "AccumulateGrad: gradient of shape " << g.shape()
                                      << " for a leaf of shape " << leaf.shape();
  Tensor existing = leaf.grad();
  if (!existing.defined()) {
    // Steal the incoming buffer when nobody else can see it; otherwise copy.
    bool exclusive = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                     g.is_contiguous() && g.dtype() == leaf.dtype();
    leaf.set_grad(exclusive ? g.detach() : ConvertTo(g, leaf.dtype(), /*force_copy=*/true));
  } else {
    AddInPlace(existing, g);
  }
  if (leaf_->meta) {
    for (auto& hook : leaf_->meta->post_accumulate_hooks) hook(leaf);
  }
  return {};
}

std::shared_ptr<Node> GradAccumulator(const Tensor& leaf) {
  // Graphs built on several threads may use one leaf: creating its meta and accumulator (and
  // reading the weak pointer) must not race.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  AutogradMeta& meta = leaf.impl()->mutable_meta();
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return acc;
}

}  // namespace trainyard::autograd
