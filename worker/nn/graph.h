// GraphModel: a model written in the job spec as a graph (model.graph), run by interpreting the
// program common/spec/model_graph.h compiles from it. No user code runs: every node is an op
// of the catalogue (docs/design/011-model-graphs.md), built here from library modules and ops.
//
// Parameters live under each node's dotted module path, in PyTorch's order (modules in the
// order the graph runs them; a block repeated N times numbered .0 .. .N-1 like a ModuleList),
// so a graph written with a PyTorch module's names has that module's state_dict:
// examples/graphs/gpt.yaml loads nanoGPT's weights and the zoo's Gpt's. A linear node with
// `share` uses the named node's weight (Note [Tied embedding] in gpt.h).
//
//   ASSIGN_OR_RETURN(std::shared_ptr<nn::Module> model, nn::BuildGraph(spec.model.graph, &gen));
#pragma once

#include <memory>
#include <vector>

#include "common/spec/model_graph.h"
#include "common/status.h"
#include "worker/nn/module.h"
#include "worker/tensor/generator.h"

namespace trainyard::nn {

// LLaMA's RMSNorm (torch.nn.RMSNorm over the last dim): x / sqrt(mean(x^2) + eps) * weight,
// weight (C) initialised to ones.
class RMSNorm : public Module {
 public:
  RMSNorm(int64_t features, double eps);
  Tensor Forward(const Tensor& x) override;
  const Tensor& weight() const { return weight_; }

 private:
  double eps_;
  Tensor weight_;
};

class GraphModel : public Module {
 public:
  // Builds every op's module, drawing weights from gen (which also drives dropout and must
  // outlive the model; the default generator when null).
  GraphModel(spec::CompiledGraph graph, Generator* gen);

  // x: (B, *input.shape) of the input's dtype -> the output node's value.
  Tensor Forward(const Tensor& x) override;
  // The shape and dtype of x, and token ids within every embedding that reads the input.
  Status CheckInput(const Tensor& x) const override;

  const spec::CompiledGraph& graph() const { return g_; }

  // A rotary op's cos and sin for one sequence length, device and dtype.
  struct RotaryTables {
    Tensor cos, sin;
  };

 private:
  // Registers `module` under its dotted path, making the containers on the way.
  void Place(const std::string& path, std::shared_ptr<Module> module);
  std::shared_ptr<Module> MakeModule(const spec::GraphOp& op, Generator* gen);
  Tensor Run(size_t i, const std::vector<Tensor>& values);

  spec::CompiledGraph g_;
  Generator* gen_;
  std::vector<std::shared_ptr<Module>> modules_;  // per op; null where it has no parameters
  std::vector<RotaryTables> rotary_;              // per op; a rotary op's, for the last T
};

// Compiles the graph (InvalidArgument naming every problem) and builds the model.
StatusOr<std::shared_ptr<Module>> BuildGraph(const spec::GraphSpec& graph,
                                             Generator* gen = nullptr);

}  // namespace trainyard::nn
