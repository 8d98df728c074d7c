// LlamaGraph: Hugging Face's LlamaForCausalLM written as a model graph (model_graph.h).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/spec/model_graph.h"

namespace trainyard::spec {

namespace {

GraphNodeSpec Node(std::string name, std::string op, std::vector<std::string> inputs) {
  GraphNodeSpec n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(inputs);
  return n;
}

GraphNodeSpec Linear(std::string name, std::string input, int64_t out) {
  GraphNodeSpec n = Node(std::move(name), "linear", {std::move(input)});
  n.out_features = out;
  n.bias = false;
  n.init_std = 0.02;  // LlamaConfig.initializer_range
  return n;
}

}  // namespace

GraphSpec LlamaGraph(const LlamaSpec& l, int64_t vocab) {
  const int64_t v = l.vocab_size > 0 ? l.vocab_size : std::max<int64_t>(vocab, 1);
  const int64_t kv = l.n_kv_head > 0 ? l.n_kv_head : l.n_head;
  const int64_t hs = l.n_embd / std::max<int64_t>(l.n_head, 1);
  const int64_t hidden =
      l.intermediate_size > 0 ? l.intermediate_size : (8 * l.n_embd / 3 + 7) / 8 * 8;
  auto norm = [&](std::string name, std::string input) {
    GraphNodeSpec n = Node(std::move(name), "rms_norm", {std::move(input)});
    n.eps = l.rms_norm_eps;
    return n;
  };
  auto rotary = [&](std::string name, std::string input, int64_t heads) {
    GraphNodeSpec n = Node(std::move(name), "rotary", {std::move(input)});
    n.heads = heads;
    n.theta = l.rope_theta;
    return n;
  };
  GraphNodeSpec attention = Node("self_attn.attn", "attention",
                                 {"self_attn.q_rot", "self_attn.k_rot", "self_attn.v_proj"});
  attention.heads = l.n_head;
  attention.kv_heads = kv == l.n_head ? 0 : kv;
  attention.causal = true;
  GraphBlockSpec layer;
  layer.name = "decoder_layer";
  layer.output = "out";
  // In LlamaDecoderLayer's order: self_attn, mlp, then the two norms (the order of its
  // state_dict); the graph runs them where their inputs are.
  layer.nodes = {Linear("self_attn.q_proj", "input_layernorm", l.n_head * hs),
                 Linear("self_attn.k_proj", "input_layernorm", kv * hs),
                 Linear("self_attn.v_proj", "input_layernorm", kv * hs),
                 rotary("self_attn.q_rot", "self_attn.q_proj", l.n_head),
                 rotary("self_attn.k_rot", "self_attn.k_proj", kv),
                 attention,
                 Linear("self_attn.o_proj", "self_attn.attn", l.n_embd),
                 Node("attn_out", "add", {"x", "self_attn.o_proj"}),
                 Linear("mlp.gate_proj", "post_attention_layernorm", hidden),
                 Linear("mlp.up_proj", "post_attention_layernorm", hidden),
                 Node("mlp.act", "silu", {"mlp.gate_proj"}),
                 Node("mlp.gated", "mul", {"mlp.act", "mlp.up_proj"}),
                 Linear("mlp.down_proj", "mlp.gated", l.n_embd),
                 Node("out", "add", {"attn_out", "mlp.down_proj"}),
                 norm("input_layernorm", "x"),
                 norm("post_attention_layernorm", "attn_out")};
  GraphSpec g;
  g.input = {"input_ids", "int64", {l.context}};
  g.blocks = {layer};
  GraphNodeSpec embed = Node("model.embed_tokens", "embedding", {"input_ids"});
  embed.num_embeddings = v;
  embed.embedding_dim = l.n_embd;
  embed.init_std = 0.02;
  // One run is not numbered; its name says model.layers.0, as the ModuleList's would.
  const std::string layers_name = l.n_layer == 1 ? "model.layers.0" : "model.layers";
  GraphNodeSpec layers = Node(layers_name, "block", {"model.embed_tokens"});
  layers.block = "decoder_layer";
  layers.repeat = l.n_layer;
  GraphNodeSpec head = Linear("lm_head", "model.norm", v);
  if (l.tie_word_embeddings) head.share = "model.embed_tokens", head.init_std = 0;
  g.nodes = {embed, layers, norm("model.norm", layers_name), head};
  return g;
}

}  // namespace trainyard::spec
