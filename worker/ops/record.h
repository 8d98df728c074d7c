// Recording helpers for differentiable ops. An op computes its output, then, if ShouldRecord,
// records a node whose backward is a lambda next to the forward code:
//
//   Tensor Mul(const Tensor& a, const Tensor& b) {
//     Tensor out = ...;
//     if (autograd::ShouldRecord({&a, &b})) {
//       auto node = Record("MulBackward0", {&a, &b}, [](autograd::Node& n, GradList&& g) {
//         return GradList{Mul(g[0], n.saved(1)), Mul(g[0], n.saved(0))};
//       });
//       node->Save(a); node->Save(b);
//       autograd::SetHistory(out, node);
//     }
//     return out;
//   }
//
// The lambda runs with grad mode off, so backward formulas reuse the forward ops. It returns
// one gradient per input edge (undefined where none is needed: check NeedsGrad(n, i)).
#pragma once

#include <memory>
#include <utility>

#include "worker/autograd/grad_mode.h"
#include "worker/autograd/node.h"

namespace trainyard::ops {

using autograd::GradList;
using autograd::Node;

template <typename F>
class LambdaNode final : public Node {
 public:
  LambdaNode(const char* name, uint32_t num_outputs, F fn)
      : Node(num_outputs), name_(name), fn_(std::move(fn)) {}
  const char* name() const override { return name_; }
  GradList Apply(GradList&& grads) override { return fn_(*this, std::move(grads)); }

 private:
  const char* name_;  // a string literal
  F fn_;
};

template <typename F>
std::shared_ptr<LambdaNode<F>> Record(const char* name, std::initializer_list<const Tensor*> inputs,
                                      F fn, uint32_t num_outputs = 1) {
  auto node = std::make_shared<LambdaNode<F>>(name, num_outputs, std::move(fn));
  for (const Tensor* t : inputs) node->add_edge(autograd::GradientEdge(*t));
  return node;
}

template <typename F>
std::shared_ptr<LambdaNode<F>> RecordList(const char* name, const std::vector<Tensor>& inputs, F fn,
                                          uint32_t num_outputs = 1) {
  auto node = std::make_shared<LambdaNode<F>>(name, num_outputs, std::move(fn));
  for (const Tensor& t : inputs) node->add_edge(autograd::GradientEdge(t));
  return node;
}

// Whether input i of node n needs a gradient.
inline bool NeedsGrad(const Node& n, size_t i) {
  return i < n.next_edges().size() && n.next_edges()[i].valid();
}

}  // namespace trainyard::ops
