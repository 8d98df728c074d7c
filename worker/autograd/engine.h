// The backward engine: walks the graph from the roots in dependency order without recursion
// (a 100 000-op chain needs no stack), running each node once all gradients for it arrived.
// Each call runs on its calling thread with its own per-node state, so backward calls on
// graphs that share leaves may run on different threads at once, and a hook may itself call
// Backward or Grad. Two calls through the same non-leaf nodes at once are not supported.
//
// Semantics follow PyTorch: leaves accumulate into .grad; non-leaves keep a gradient only after
// RetainGrad(); saved tensors are released after use unless retain_graph; a non-scalar root
// needs an explicit gradient (a vector-Jacobian product). Backward computations do not record
// a graph (no create_graph) and run with autocast off, hooks included (Note [Autocast policy] in
// worker/autograd/autocast.h).
#pragma once

#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::autograd {

// Accumulates d(root)/d(leaf) * gradient into every reachable leaf's .grad. `gradient` may be
// undefined only for a one-element root (then it is 1).
Status Backward(const Tensor& root, const Tensor& gradient = Tensor(), bool retain_graph = false);
Status Backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradients,
                bool retain_graph = false);

struct GradOptions {
  bool retain_graph = false;
  // When false, an input that the outputs do not depend on is an error; when true its
  // gradient comes back undefined.
  bool allow_unused = false;
};

// Returns d(outputs)/d(input) * grad_outputs for each input without touching any .grad. Only
// the part of the graph between outputs and inputs runs.
StatusOr<std::vector<Tensor>> Grad(const std::vector<Tensor>& outputs,
                                   const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& grad_outputs = {},
                                   GradOptions options = {});

}  // namespace trainyard::autograd
