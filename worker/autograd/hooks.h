// Gradient hooks and retain_grad.
#pragma once

#include "worker/tensor/tensor.h"

namespace trainyard::autograd {

// Calls `hook(grad)` whenever a gradient for `t` is computed; a defined return value replaces
// the gradient. On a leaf it runs before accumulation into .grad; on a non-leaf, before the
// gradient enters t's grad_fn. `t` must require grad.
void RegisterHook(const Tensor& t, TensorHook hook);

// Calls `hook(leaf)` right after leaf.grad has been updated (what data-parallel training
// listens to). `leaf` must be a leaf that requires grad.
void RegisterPostAccumulateGradHook(const Tensor& leaf, PostAccumulateGradHook hook);

// Makes a non-leaf tensor keep its gradient in .grad after backward (no-op on leaves).
void RetainGrad(const Tensor& t);

}  // namespace trainyard::autograd
