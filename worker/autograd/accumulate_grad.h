// AccumulateGrad: the node at the end of every path to a leaf that requires grad. It runs the
// leaf's hooks, adds the gradient into leaf.grad (in place once .grad exists, so .grad can be a
// view into a bucket owned by data-parallel code), then runs post-accumulate-grad hooks.
#pragma once

#include <mutex>

#include "worker/autograd/node.h"

namespace trainyard::autograd {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node(1), leaf_(std::move(leaf)) {}
  const char* name() const override { return "AccumulateGrad"; }
  GradList Apply(GradList&& grads) override;
  bool is_accumulate_grad() const override { return true; }
  Tensor leaf() const { return Tensor(leaf_); }
  // Runs the leaf's tensor hooks on g (which they may replace); Grad() calls it for captured
  // leaves, Apply before accumulating.
  Status RunLeafHooks(Tensor& g);

 private:
  std::shared_ptr<TensorImpl> leaf_;
  std::mutex mu_;  // backward runs on other threads may share this leaf
};

// The leaf's accumulator, created on first use and shared by every edge to this leaf.
std::shared_ptr<Node> GradAccumulator(const Tensor& leaf);

}  // namespace trainyard::autograd
