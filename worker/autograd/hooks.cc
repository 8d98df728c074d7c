#include "worker/autograd/hooks.h"

#include "worker/autograd/node.h"

namespace trainyard::autograd {

void RegisterHook(const Tensor& t, TensorHook hook) {
  TY_CHECK(t.requires_grad()) << "cannot register a hook on a tensor that does not require grad";
  if (t.is_leaf()) {
    t.impl()->mutable_meta().hooks.push_back(std::move(hook));
  } else {
    t.grad_fn()->AddPreHook(t.output_nr(), std::move(hook));
  }
}

void RegisterPostAccumulateGradHook(const Tensor& leaf, PostAccumulateGradHook hook) {
  TY_CHECK(leaf.is_leaf() && leaf.requires_grad())
      << "post-accumulate-grad hooks can only be registered on leaves that require grad";
  leaf.impl()->mutable_meta().post_accumulate_hooks.push_back(std::move(hook));
}

void RetainGrad(const Tensor& t) {
  TY_CHECK(t.requires_grad()) << "cannot retain the grad of a tensor that does not require grad";
  if (t.is_leaf()) return;
  t.impl()->mutable_meta().retains_grad = true;
  t.grad_fn()->AddRetainGrad(t.output_nr(), t.impl_ptr());
}

}  // namespace trainyard::autograd
