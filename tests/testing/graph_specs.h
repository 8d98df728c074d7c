// Model graphs (model.graph) for tests: the zoo's GPT and MLP written as graphs with the zoo's
// parameter names, as examples/graph-*.yaml write them, and a reader for a graph's JSON.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/json.h"
#include "common/spec/job_spec.h"

namespace trainyard::testing {

// A graph from its JSON text; TY_CHECKs that it is valid.
inline spec::GraphSpec GraphOf(const std::string& graph_json) {
  StatusOr<Json> json = Json::Parse(graph_json);
  TY_CHECK(json.ok()) << json.status();
  StatusOr<spec::GraphSpec> graph = spec::ParseGraphSpec(*json);
  TY_CHECK(graph.ok()) << graph.status();
  return *graph;
}

// nanoGPT (worker/nn/gpt.h) without dropout: what nn::GptConfig{vocab, context, layers, heads,
// embd, 0, true} builds, name for name. With gelu "tanh", Hugging Face's GPT-2 (gelu_new).
inline std::string GptGraphJson(int64_t vocab, int64_t context, int64_t layers, int64_t heads,
                                int64_t embd, const std::string& gelu = "none") {
  auto s = [](int64_t v) { return std::to_string(v); };
  const std::string proj_std = std::to_string(0.02 / std::sqrt(2.0 * static_cast<double>(layers)));
  return R"({"input": {"name": "idx", "dtype": "int64", "shape": [)" + s(context) + R"(]},
    "blocks": [{"name": "block", "input": "x", "nodes": [
      {"name": "ln_1", "op": "layer_norm", "inputs": ["x"]},
      {"name": "attn.c_attn", "op": "linear", "inputs": ["ln_1"], "out_features": )" +
         s(3 * embd) + R"(, "init_std": 0.02},
      {"name": "attn.sdpa", "op": "attention", "inputs": ["attn.c_attn"], "heads": )" +
         s(heads) + R"(, "causal": true},
      {"name": "attn.c_proj", "op": "linear", "inputs": ["attn.sdpa"], "out_features": )" +
         s(embd) + R"(, "init_std": )" + proj_std + R"(},
      {"name": "attn_out", "op": "add", "inputs": ["x", "attn.c_proj"]},
      {"name": "ln_2", "op": "layer_norm", "inputs": ["attn_out"]},
      {"name": "mlp.c_fc", "op": "linear", "inputs": ["ln_2"], "out_features": )" +
         s(4 * embd) + R"(, "init_std": 0.02},
      {"name": "mlp.gelu", "op": "gelu", "inputs": ["mlp.c_fc"], "approximate": ")" +
         gelu +
         R"("},
      {"name": "mlp.c_proj", "op": "linear", "inputs": ["mlp.gelu"], "out_features": )" +
         s(embd) + R"(, "init_std": )" + proj_std + R"(},
      {"name": "out", "op": "add", "inputs": ["attn_out", "mlp.c_proj"]}]}],
    "nodes": [
      {"name": "transformer.wte", "op": "embedding", "inputs": ["idx"], "num_embeddings": )" +
         s(vocab) + R"(, "embedding_dim": )" + s(embd) + R"(, "init_std": 0.02},
      {"name": "transformer.wpe", "op": "position_embedding", "inputs": ["idx"],
       "num_embeddings": )" +
         s(context) + R"(, "embedding_dim": )" + s(embd) + R"(, "init_std": 0.02},
      {"name": "embedded", "op": "add", "inputs": ["transformer.wte", "transformer.wpe"]},
      {"name": "transformer.h", "op": "block", "block": "block", "repeat": )" +
         s(layers) + R"(, "inputs": ["embedded"]},
      {"name": "transformer.ln_f", "op": "layer_norm", "inputs": ["transformer.h"]},
      {"name": "lm_head", "op": "linear", "inputs": ["transformer.ln_f"],
       "share": "transformer.wte", "bias": false}]})";
}

// The zoo's MLP (worker/nn/mlp.h) with relu: flatten, then fc1 .. fcN.
inline std::string MlpGraphJson(const std::vector<int64_t>& sizes) {
  std::string nodes = R"({"name": "flat", "op": "flatten", "inputs": ["x"]})";
  std::string last = "flat";
  for (size_t i = 1; i < sizes.size(); ++i) {
    const std::string fc = "fc" + std::to_string(i);
    nodes += R"(, {"name": ")" + fc + R"(", "op": "linear", "inputs": [")" + last +
             R"("], "out_features": )" + std::to_string(sizes[i]) + "}";
    last = fc;
    if (i + 1 < sizes.size()) {
      nodes += R"(, {"name": "act)" + std::to_string(i) + R"(", "op": "relu", "inputs": [")" + fc +
               R"("]})";
      last = "act" + std::to_string(i);
    }
  }
  return R"({"input": {"name": "x", "shape": [)" + std::to_string(sizes[0]) + R"(]}, "nodes": [)" +
         nodes + "]}";
}

}  // namespace trainyard::testing
