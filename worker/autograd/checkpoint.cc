#include "worker/autograd/checkpoint.h"

#include <optional>
#include <string>
#include <utility>

#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/autograd/node.h"

namespace trainyard::autograd {
namespace {

struct GeneratorState {
  Generator* gen;
  uint64_t seed;
  uint64_t offset;
};

std::vector<GeneratorState> Snapshot(const std::vector<Generator*>& gens) {
  std::vector<GeneratorState> states;
  for (Generator* g : gens) states.push_back({g, g->seed(), g->offset()});
  return states;
}

void Restore(const std::vector<GeneratorState>& states) {
  for (const GeneratorState& s : states) s.gen->SetState(s.seed, s.offset);
}

// For its scope, puts the generators back to the states they had at the forward call; on exit
// returns them to where they were on entry, so the recompute leaves no trace.
class RngReplay {
 public:
  explicit RngReplay(const std::vector<GeneratorState>& at_forward) {
    std::vector<Generator*> gens;
    for (const GeneratorState& s : at_forward) gens.push_back(s.gen);
    now_ = Snapshot(gens);
    Restore(at_forward);
  }
  ~RngReplay() { Restore(now_); }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  std::vector<GeneratorState> now_;
};

// Saved: the forward inputs (saved(i) is input i, version-checked like any saved tensor).
// Edges: one per input. Outputs: one per output of fn.
class CheckpointBackward final : public Node {
 public:
  CheckpointBackward(CheckpointFn fn, std::vector<GeneratorState> rng, bool preserve_rng,
                     DType autocast)
      : fn_(std::move(fn)),
        rng_(std::move(rng)),
        preserve_rng_(preserve_rng),
        autocast_(autocast) {}
  const char* name() const override { return "CheckpointBackward"; }
  GradList Apply(GradList&& grads) override;

 private:
  // Fresh leaves over the saved inputs, requiring grad as the originals did.
  std::vector<Tensor> DetachedInputs() const;

  CheckpointFn fn_;
  std::vector<GeneratorState> rng_;  // at the forward call
  bool preserve_rng_;
  DType autocast_;  // AutocastDType() at the forward call
};

std::vector<Tensor> CheckpointBackward::DetachedInputs() const {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < next_edges().size(); ++i) {
    const Tensor& saved_input = saved(i);
    if (!saved_input.defined()) {
      inputs.emplace_back();
      continue;
    }
    Tensor in = saved_input.detach();
    if (saved_input.requires_grad()) in.set_requires_grad(true);
    inputs.push_back(std::move(in));
  }
  return inputs;
}

GradList CheckpointBackward::Apply(GradList&& grads) {
  const std::vector<Tensor> inputs = DetachedInputs();
  std::vector<Tensor> outputs;
  {
    EnableGradGuard enable_grad;  // the engine runs Apply with grad mode and autocast off
    AutocastGuard autocast(autocast_);
    std::optional<RngReplay> replay;
    if (preserve_rng_) replay.emplace(rng_);
    outputs = fn_(inputs);
  }
  if (outputs.size() != num_outputs()) {
    SetBackwardError(FailedPreconditionError(
        "CheckpointBackward: the recomputed function returned " + std::to_string(outputs.size()) +
        " outputs but the forward returned " + std::to_string(num_outputs()) +
        "; a checkpointed function must give the same outputs every time"));
    return {};
  }
  std::vector<Tensor> roots, root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !outputs[i].requires_grad() || !grads[i].defined()) continue;
    roots.push_back(outputs[i]);
    root_grads.push_back(grads[i]);
  }
  if (!roots.empty()) {
    Status s = Backward(roots, root_grads);
    if (!s.ok()) {
      const std::string where = "CheckpointBackward: backward through the recomputed function: ";
      SetBackwardError(Status(s.code(), where + std::string(s.message())));
      return {};
    }
  }
  GradList out;
  for (const Tensor& in : inputs) out.push_back(in.defined() ? in.grad() : Tensor());
  return out;
}

std::vector<Generator*> GeneratorsOf(const CheckpointOptions& options) {
  if (options.generators.empty()) return {&DefaultGenerator()};
  std::vector<Generator*> gens;
  for (Generator* g : options.generators)
    if (g != nullptr) gens.push_back(g);
  return gens;
}

}  // namespace

std::vector<Tensor> Checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  if (!ShouldRecord(inputs)) return fn(inputs);
  // Before fn draws anything.
  std::vector<GeneratorState> rng;
  if (options.preserve_rng_state) rng = Snapshot(GeneratorsOf(options));
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  auto node = std::make_shared<CheckpointBackward>(std::move(fn), std::move(rng),
                                                   options.preserve_rng_state, AutocastDType());
  for (const Tensor& in : inputs) {
    node->add_edge(GradientEdge(in));
    node->Save(in);
  }
  node->set_num_outputs(static_cast<uint32_t>(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) continue;
    // A fresh handle, so an output that is an input gets its own history.
    outputs[i] = outputs[i].detach();
    if (IsFloating(outputs[i].dtype())) SetHistory(outputs[i], node, static_cast<uint32_t>(i));
  }
  return outputs;
}

Tensor Checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input,
                  const CheckpointOptions& options) {
  CheckpointFn wrapped = [fn = std::move(fn)](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{fn(in[0])};
  };
  return Checkpoint(std::move(wrapped), std::vector<Tensor>{input}, options)[0];
}

}  // namespace trainyard::autograd
