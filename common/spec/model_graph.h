// Model graphs: a model written in the job spec as named nodes (model.graph; the ops and their
// options are listed in docs/design/011-model-graphs.md). CompileGraph checks a GraphSpec and
// infers every node's shape before anything runs, so the coordinator refuses a broken graph at
// submission: an unknown op, a dangling or cyclic input, a shape mismatch (naming both nodes and
// both shapes), an option the op does not take. The result is the flat program that
// worker/nn/graph.h builds and runs: blocks expanded `repeat` times, ops in an order where each
// comes after its inputs, each with its output shape and the module path its parameters live
// under (PyTorch's dotted names: "transformer.h.3.attn.c_attn").
//
// LlamaGraph writes the zoo's LLaMA (model.llama) as such a graph, and ModelGraph gives the
// graph of a model spec that is one, so both share the checks, the estimates and the builder.
//
//   ASSIGN_OR_RETURN(spec::CompiledGraph g, spec::CompileGraph(spec.model.graph));
//   g.parameters;  g.flops_per_sample;  g.ops[i].shape;  ...
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/status.h"

namespace trainyard::spec {

// A value's shape: one sample's dims, after a batch dimension when `batched` (a position
// embedding's rows are not batched and broadcast over the batch).
struct ValueShape {
  std::vector<int64_t> dims;
  bool batched = true;
  bool int64 = false;  // token ids; float32 otherwise

  int64_t rank() const { return static_cast<int64_t>(dims.size()) + (batched ? 1 : 0); }
  int64_t numel() const;         // of one sample's dims
  std::string ToString() const;  // "(B, 64, 256)"; "(64, 256)" unbatched
};

// One op of the expanded graph. Value 0 is the model's input; op i gives value i + 1.
struct GraphOp {
  GraphNodeSpec node;           // its options
  std::string where;            // the spec path: "model.graph.blocks[0].nodes[2]"
  std::string module;           // where its parameters live ("transformer.h.3.ln_1"); "" if none
  std::vector<int> inputs;      // values
  ValueShape shape;             // of its output
  int shared = -1;              // linear with `share`: the op whose weight it uses
  std::vector<int64_t> weight;  // linear, embedding: the weight's shape, for `share`
  // Where its node is written: node indices (and repeat numbers) down the scopes. Modules are
  // registered in this order, so the state dict follows the order the graph is written in.
  std::vector<int64_t> key;
  int64_t parameters = 0;  // its own (a shared weight counts at its owner)
  double flops = 0;        // forward, per sample
};

struct CompiledGraph {
  ValueShape input;
  std::vector<GraphOp> ops;  // in run order, each after its inputs
  int output = 0;            // the value the model returns
  int64_t parameters = 0;
  double flops_per_sample = 0;  // forward multiply-adds x 2 of the linear, conv and attention ops

  const ValueShape& shape_of(int value) const {
    return value == 0 ? input : ops[static_cast<size_t>(value - 1)].shape;
  }
};

// Hugging Face's LlamaForCausalLM as a graph, with its state_dict names and order; vocab
// stands in for llama.vocab_size when that is 0.
GraphSpec LlamaGraph(const LlamaSpec& llama, int64_t vocab);
// model.graph, or model.llama's LlamaGraph (vocab: the data's vocabulary, for vocab_size 0);
// nothing for the other zoo models.
std::optional<GraphSpec> ModelGraph(const ModelSpec& model, int64_t vocab = 1);

// The ops a node may name, in the catalogue's order.
std::vector<std::string> GraphOps();

// Checks `graph` and infers its shapes. InvalidArgument listing every problem, one per line,
// each with its spec path ("model.graph.nodes[3] (fc2): ...").
StatusOr<CompiledGraph> CompileGraph(const GraphSpec& graph);

}  // namespace trainyard::spec
