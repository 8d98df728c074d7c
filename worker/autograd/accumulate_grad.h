// AccumulateGrad: the node at the end of every path to a leaf that requires grad. It runs the
// leaf's hooks, adds the gradient into leaf.grad (in place once .grad exists, so .grad can be a
// view into a bucket owned by data-parallel code), then runs post-accumulate-grad hooks.
#pragma once

#include <limits>
#include <mutex>

#include "worker/autograd/node.h"

namespace trainyard::autograd {

class AccumulateGrad final : public Node {
 public:
  // Runs as soon as it is ready (the highest sequence number), as in PyTorch: a leaf's gradient
  // lands in .grad, and post-accumulate hooks (the data-parallel reducer) fire, while the rest
  // of backward still runs. Created once per leaf, its own number would be old and put it last.
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node(1), leaf_(std::move(leaf)) {
    set_sequence_nr(std::numeric_limits<uint64_t>::max());
  }
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
