#include "worker/autograd/engine.h"

#include <atomic>
#include <queue>
#include <unordered_map>
#include <utility>

#include "worker/autograd/accumulate_grad.h"
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

class Engine {
 public:
  Engine(bool retain_graph, std::vector<Capture> captures)
      : retain_graph_(retain_graph), captures_(std::move(captures)) {
    static std::atomic<uint64_t> next_run{1};
    run_id_ = next_run.fetch_add(1);
    for (const Capture& c : captures_) capture_nodes_[c.node] = true;
  }

  Status Run(const std::shared_ptr<Node>& root, size_t num_results);
  std::vector<Tensor>& results() { return results_; }

 private:
  void Prepare(Node* root);
  Status Execute(Node* node);
  bool capturing() const { return !captures_.empty(); }

  bool retain_graph_;
  std::vector<Capture> captures_;
  std::unordered_map<Node*, bool> capture_nodes_;
  std::vector<Tensor> results_;
  uint64_t run_id_;

  struct BySequence {
    bool operator()(const Node* a, const Node* b) const {
      return a->sequence_nr() < b->sequence_nr();
    }
  };
  std::priority_queue<Node*, std::vector<Node*>, BySequence> ready_;
};

// Counts, for every node reachable from the root, how many edges point at it, with an explicit
// stack. With captures, also marks the nodes that lie on a path to a capture (`needed_`):
// nodes finish in post-order, after all their children, so one pass suffices.
void Engine::Prepare(Node* root) {
  struct Frame {
    Node* node;
    size_t next_edge;
  };
  std::vector<Frame> stack;
  root->run_id_ = run_id_;
  root->deps_ = 0;
  root->needed_ = !capturing();
  stack.push_back({root, 0});
  while (!stack.empty()) {
    Frame& f = stack.back();
    Node* node = f.node;
    if (f.next_edge < node->edges_.size()) {
      Node* child = node->edges_[f.next_edge++].fn.get();
      if (child == nullptr) continue;
      if (child->run_id_ != run_id_) {
        child->run_id_ = run_id_;
        child->deps_ = 1;  // pending_ is empty: every run leaves it so
        child->needed_ = !capturing() || capture_nodes_.count(child) > 0;
        stack.push_back({child, 0});
      } else {
        ++child->deps_;
      }
      continue;
    }
    stack.pop_back();
    if (capturing() && !node->needed_) {
      for (const Edge& e : node->edges_)
        if (e.fn && e.fn->needed_) node->needed_ = true;
    }
  }
}

Status Engine::Execute(Node* node) {
  GradList grads = std::move(node->pending_);
  node->pending_.clear();
  grads.resize(node->num_outputs());
  if (node->has_pre_hooks()) node->RunPreHooks(grads);
  if (capturing()) {
    for (const Capture& c : captures_)
      if (c.node == node && grads[c.slot].defined()) results_[c.index] = grads[c.slot];
    // Grad() never writes .grad: the accumulators of captured leaves do not run.
    if (node->is_accumulate_grad()) return OkStatus();
  }
  RETURN_IF_ERROR(node->CheckSaved());
  GradList out;
  {
    NoGradGuard no_grad;
    out = node->Apply(std::move(grads));
  }
  RETURN_IF_ERROR(TakeBackwardError());
  if (!retain_graph_) node->ReleaseSaved();
  const auto& edges = node->edges_;
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    if (!e.fn || i >= out.size() || !out[i].defined()) continue;
    Node* next = e.fn.get();
    if (next->pending_.size() <= e.input_nr) next->pending_.resize(next->num_outputs());
    AccumulateInto(next->pending_[e.input_nr], out[i]);
  }
  return OkStatus();
}

Status Engine::Run(const std::shared_ptr<Node>& root, size_t num_results) {
  results_.assign(num_results, Tensor());
  Prepare(root.get());
  ready_.push(root.get());
  Status status;
  while (!ready_.empty()) {
    Node* node = ready_.top();
    ready_.pop();
    if (status.ok() && node->needed_) status = Execute(node);
    // Even after an error or for a skipped node, release the dependents so the walk ends and
    // the scratch state is cleared.
    if (!status.ok() || !node->needed_) node->pending_.clear();
    for (const Edge& e : node->edges_) {
      if (e.fn && --e.fn->deps_ == 0) ready_.push(e.fn.get());
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
