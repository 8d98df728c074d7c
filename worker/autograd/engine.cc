#include "worker/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <utility>

#include "worker/autograd/accumulate_grad.h"
#include "worker/autograd/autocast.h"
#include "worker/autograd/grad_mode.h"
#include "worker/autograd/node.h"
#include "worker/tensor/factories.h"

namespace trainyard::autograd {

// Holds the roots' gradients; its edges are the roots, so roots that depend on each other are
// counted like any other dependency.
class GraphRoot final : public Node {
 public:
  explicit GraphRoot(GradList grads) : Node(0), grads_(std::move(grads)) {}
  const char* name() const override { return "GraphRoot"; }
  GradList Apply(GradList&&) override { return std::move(grads_); }

 private:
  GradList grads_;
};

// A gradient to capture for Grad(): the one flowing into (node, input slot).
struct Capture {
  Node* node;
  uint32_t slot;
  size_t index;  // position in the result
};

// One backward run. Its per-node state (dependency count, gradients received so far) lives
// here, not in the nodes, so runs over graphs that share nodes (every graph that uses a
// parameter shares its AccumulateGrad) never see each other's state: runs on other threads,
// and runs started from inside a hook, are independent (as PyTorch's GraphTask).
class Engine {
 public:
  Engine(bool retain_graph, std::vector<Capture> captures)
      : retain_graph_(retain_graph), captures_(std::move(captures)) {}

  Status Run(const std::shared_ptr<Node>& root, size_t num_results);
  std::vector<Tensor>& results() { return results_; }

 private:
  struct Task {
    int64_t deps = 0;            // edges from nodes of this run that have not yet delivered
    bool needed = true;          // Apply must run (Grad(): some capture lies below)
    bool capture = false;        // Grad(): a gradient flowing into this node is a result
    GradList pending;            // gradients received, one slot per forward output
    SmallVector<Task*, 2> next;  // the tasks of the node's edges, in edge order (or null)
  };

  void Prepare(Node* root);
  Status Execute(Node* node, Task& task);
  bool capturing() const { return !captures_.empty(); }
  Task& NewTask(Node* node);

  bool retain_graph_;
  std::vector<Capture> captures_;
  std::vector<Tensor> results_;
  std::unordered_map<Node*, Task> tasks_;

  struct BySequence {
    bool operator()(const std::pair<Node*, Task*>& a, const std::pair<Node*, Task*>& b) const {
      return a.first->sequence_nr() < b.first->sequence_nr();
    }
  };
  std::priority_queue<std::pair<Node*, Task*>, std::vector<std::pair<Node*, Task*>>, BySequence>
      ready_;
};

Engine::Task& Engine::NewTask(Node* node) {
  Task& t = tasks_[node];
  if (capturing()) {
    for (const Capture& c : captures_) t.capture = t.capture || c.node == node;
    t.needed = false;  // set in post-order below when a capture lies under it
  }
  return t;
}

// Counts, for every node reachable from the root, how many edges point at it, with an explicit
// stack. With captures, also marks the nodes that must run Apply (`needed`: a capture lies
// below them): nodes finish in post-order, after all their children, so one pass suffices.
void Engine::Prepare(Node* root) {
  struct Frame {
    Node* node;
    Task* task;
    size_t next_edge;
  };
  std::vector<Frame> stack;
  stack.push_back({root, &NewTask(root), 0});
  while (!stack.empty()) {
    Frame& f = stack.back();
    const auto& edges = f.node->next_edges();
    if (f.next_edge < edges.size()) {
      Node* child = edges[f.next_edge++].fn.get();
      if (child == nullptr) {
        f.task->next.push_back(nullptr);
        continue;
      }
      auto it = tasks_.find(child);
      if (it == tasks_.end()) {
        Task& t = NewTask(child);
        t.deps = 1;
        f.task->next.push_back(&t);
        stack.push_back({child, &t, 0});  // invalidates f
      } else {
        ++it->second.deps;
        f.task->next.push_back(&it->second);
      }
      continue;
    }
    Frame done = f;
    stack.pop_back();
    if (capturing() && !done.task->needed) {
      for (const Task* child : done.task->next)
        if (child && (child->needed || child->capture)) done.task->needed = true;
    }
  }
}

Status Engine::Execute(Node* node, Task& task) {
  GradList grads = std::move(task.pending);
  task.pending.clear();
  grads.resize(node->num_outputs());
  if (node->has_pre_hooks()) {
    node->RunPreHooks(grads);
    RETURN_IF_ERROR(TakeBackwardError());
  }
  if (task.capture) {
    if (node->is_accumulate_grad() && grads[0].defined()) {
      RETURN_IF_ERROR(static_cast<AccumulateGrad*>(node)->RunLeafHooks(grads[0]));
    }
    for (const Capture& c : captures_)
      if (c.node == node && grads[c.slot].defined()) results_[c.index] = grads[c.slot];
  }
  // Grad() only records what flows into a captured node; it runs a node's backward only when
  // another capture lies below, and never an AccumulateGrad (.grad stays untouched).
  if (capturing() && (!task.needed || node->is_accumulate_grad())) return OkStatus();
  RETURN_IF_ERROR(node->CheckSaved());
  GradList out;
  {
    NoGradGuard no_grad;
    out = node->Apply(std::move(grads));
  }
  RETURN_IF_ERROR(TakeBackwardError());
  if (!retain_graph_) node->ReleaseSaved();
  const auto& edges = node->next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    if (!e.fn || i >= out.size() || !out[i].defined()) continue;
    Task& next = *task.next[i];
    if (next.pending.size() <= e.input_nr) next.pending.resize(e.fn->num_outputs());
    AccumulateInto(next.pending[e.input_nr], out[i]);
  }
  return OkStatus();
}

Status Engine::Run(const std::shared_ptr<Node>& root, size_t num_results) {
  // Nodes and hooks compute in the dtypes their forward saved (Note [Autocast policy]).
  AutocastGuard no_autocast(DType::kFloat32);
  results_.assign(num_results, Tensor());
  tasks_.reserve(64);
  Prepare(root.get());
  ready_.push({root.get(), &tasks_.at(root.get())});
  Status status;
  while (!ready_.empty()) {
    auto [node, task] = ready_.top();
    ready_.pop();
    if (status.ok() && (task->needed || task->capture)) status = Execute(node, *task);
    task->pending.clear();
    // Even after an error or for a skipped node, release the dependents so the walk ends.
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      Task* next = task->next[i];
      if (next != nullptr && --next->deps == 0) ready_.push({edges[i].fn.get(), next});
    }
  }
  return status;
}

namespace {

StatusOr<GradList> RootGradients(const std::vector<Tensor>& roots,
                                 const std::vector<Tensor>& gradients) {
  if (!gradients.empty() && gradients.size() != roots.size()) {
    return InvalidArgumentError("got " + std::to_string(gradients.size()) + " gradients for " +
                                std::to_string(roots.size()) + " outputs");
  }
  GradList grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined()) return InvalidArgumentError("output " + std::to_string(i) + " is undefined");
    if (!r.requires_grad()) {
      return InvalidArgumentError("output " + std::to_string(i) +
                                  " does not require grad and has no grad_fn; nothing to "
                                  "differentiate");
    }
    Tensor g = gradients.empty() ? Tensor() : gradients[i];
    if (!g.defined()) {
      if (r.numel() != 1) {
        return InvalidArgumentError(
            "grad can be implicitly created only for scalar outputs; "
            "output " +
            std::to_string(i) + " has shape " + r.shape().ToString() +
            ": pass a gradient of that shape (a vector-Jacobian product)");
      }
      g = Ones(r.shape(), r.options());
    } else if (g.shape() != r.shape()) {
      return InvalidArgumentError("gradient " + std::to_string(i) + " has shape " +
                                  g.shape().ToString() + " but its output has shape " +
                                  r.shape().ToString());
    } else if (g.dtype() != r.dtype()) {
      g = ConvertTo(g, r.dtype());
    }
    grads.push_back(g);
  }
  return grads;
}

std::shared_ptr<Node> MakeRoot(const std::vector<Tensor>& roots, GradList grads) {
  auto root = std::make_shared<GraphRoot>(std::move(grads));
  for (const Tensor& r : roots) root->add_edge(GradientEdge(r));
  return root;
}

}  // namespace

Status Backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradients,
                bool retain_graph) {
  ASSIGN_OR_RETURN(GradList grads, RootGradients(roots, gradients));
  Engine engine(retain_graph, {});
  return engine.Run(MakeRoot(roots, std::move(grads)), 0);
}

Status Backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  std::vector<Tensor> grads;
  if (gradient.defined()) grads.push_back(gradient);
  return Backward(std::vector<Tensor>{root}, grads, retain_graph);
}

StatusOr<std::vector<Tensor>> Grad(const std::vector<Tensor>& outputs,
                                   const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& grad_outputs, GradOptions options) {
  ASSIGN_OR_RETURN(GradList grads, RootGradients(outputs, grad_outputs));
  // Resolve every input's node once and keep it alive for the whole run, so captures (raw
  // pointers) and the graph's own edges see the same node.
  std::vector<std::shared_ptr<Node>> keep;
  std::vector<Capture> captures;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined() || !in.requires_grad()) {
      return InvalidArgumentError("input " + std::to_string(i) + " does not require grad");
    }
    Edge e = GradientEdge(in);
    keep.push_back(e.fn);
    captures.push_back({e.fn.get(), e.input_nr, i});
  }
  auto root = MakeRoot(outputs, std::move(grads));
  Engine engine(options.retain_graph, captures);
  RETURN_IF_ERROR(engine.Run(root, inputs.size()));
  std::vector<Tensor> results = std::move(engine.results());
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].defined() && !options.allow_unused) {
      return InvalidArgumentError("input " + std::to_string(i) +
                                  " was not used to compute the outputs; pass "
                                  "allow_unused=true to get an undefined gradient instead");
    }
  }
  return results;
}

}  // namespace trainyard::autograd
