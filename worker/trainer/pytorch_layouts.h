// Weights saved from PyTorch modules whose names or layouts differ from ours, made ready for
// Module::LoadStateDict (checkpoint.init_from reads every file through this):
//
//   Hugging Face GPT-2 (GPT2LMHeadModel): its attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj
//     weights are Conv1D's, stored (in, out), the transpose of nn.Linear's (out, in) that
//     nanoGPT, the zoo's gpt and graph linears use. The file is taken for GPT-2's when an
//     attn.c_attn.weight is stored as the model's transposed (c_attn is never square), and then
//     all four are transposed. Its causal-mask buffers (attn.bias, attn.masked_bias) are
//     dropped when the model has no such entries.
//   Hugging Face LLaMA (LlamaForCausalLM): the names are the llama zoo entry's already
//     (model.layers.N.self_attn.q_proj.weight; nn.Linear layouts); older files' rotary
//     buffers (rotary_emb.inv_freq) are dropped.
#pragma once

#include <string>

#include "common/status.h"
#include "worker/nn/module.h"

namespace trainyard::trainer {

// `file`'s tensors as `model` names and lays them out; `note` (may be null) says what changed
// ("" when nothing did).
nn::NamedTensors FromPyTorchLayouts(nn::NamedTensors file, const nn::Module& model,
                                    std::string* note);

}  // namespace trainyard::trainer
