// The zoo's GPT: karpathy/nanoGPT's model.py, module for module, with the same state dict
// names, shapes, order and initialisation. The PyTorch code it matches (abridged from
// nanoGPT; `LayerNorm(ndim, bias)` is nanoGPT's LayerNorm with an optional bias):
//
//   class CausalSelfAttention(nn.Module):
//       def __init__(self, config):
//           self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
//           self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
//           self.attn_dropout = nn.Dropout(config.dropout)
//           self.resid_dropout = nn.Dropout(config.dropout)
//       def forward(self, x):  # (B, T, C)
//           q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # each -> (B, nh, T, hs)
//           y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if
//                                              self.training else 0, is_causal=True)
//           y = y.transpose(1, 2).contiguous().view(B, T, C)
//           return self.resid_dropout(self.c_proj(y))
//
//   class MLP(nn.Module):  # c_fc (C -> 4C), gelu = nn.GELU(), c_proj (4C -> C), dropout
//       def forward(self, x): return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))
//
//   class Block(nn.Module):  # ln_1, attn, ln_2, mlp
//       def forward(self, x):
//           x = x + self.attn(self.ln_1(x))
//           return x + self.mlp(self.ln_2(x))
//
//   class GPT(nn.Module):
//       def __init__(self, config):
//           self.transformer = nn.ModuleDict(dict(
//               wte=nn.Embedding(config.vocab_size, config.n_embd),
//               wpe=nn.Embedding(config.block_size, config.n_embd),
//               drop=nn.Dropout(config.dropout),
//               h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
//               ln_f=LayerNorm(config.n_embd, bias=config.bias)))
//           self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
//           self.transformer.wte.weight = self.lm_head.weight  # weight tying
//           self.apply(self._init_weights)  # Linear, Embedding weights ~ N(0, 0.02); biases 0
//           for pn, p in self.named_parameters():
//               if pn.endswith('c_proj.weight'):
//                   torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
//       def forward(self, idx):  # (B, T) int64, T <= block_size
//           x = self.transformer.drop(self.transformer.wte(idx) +
//                                     self.transformer.wpe(torch.arange(T)))
//           for block in self.transformer.h: x = block(x)
//           return self.lm_head(self.transformer.ln_f(x))  # (B, T, vocab_size)
//
// Forward returns the logits of every position, as nanoGPT's forward does when given targets.
//
// Note [Tied embedding]: transformer.wte.weight and lm_head.weight are one Tensor. StateDict()
// lists it under both names, like PyTorch's state_dict(); NamedParameters() and
// Parameters() list it once (as transformer.wte.weight), so an optimizer updates it once. A
// checkpoint writer that stores one entry per storage (safetensors refuses aliased tensors)
// should write it once, under transformer.wte.weight, skipping any later StateDict() entry
// whose impl() it has already written. LoadStateDict accepts such a file: a missing key whose
// tensor is tied to a loaded one counts as loaded.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "worker/nn/containers.h"
#include "worker/nn/dropout.h"
#include "worker/nn/linear.h"
#include "worker/nn/module.h"
#include "worker/nn/norm.h"

namespace trainyard::nn {

// nanoGPT's GPTConfig, with its defaults (GPT-2 small, vocabulary padded to 50304).
struct GptConfig {
  int64_t vocab_size = 50304;  // at least 1
  int64_t context = 1024;      // block_size: the longest sequence; at least 1
  int64_t n_layer = 12;        // at least 1
  int64_t n_head = 12;         // at least 1; divides n_embd
  int64_t n_embd = 768;        // at least 1
  double dropout = 0;          // embedding, attention and residual dropout; in [0, 1)
  bool bias = true;            // biases in the Linears and LayerNorms
  // Note [Block checkpointing]: in training mode with grad mode on, each block's forward runs
  // under autograd::Checkpoint: its activations are not kept but recomputed in backward
  // (about one more forward of compute for a block's activations of memory). Loss, gradients
  // and the generator's state after backward are those of a run without it.
  bool activation_checkpointing = false;
};

// InvalidArgument naming the field ("gpt.n_head"), its value and the allowed range.
Status Validate(const GptConfig& config);

class Gpt : public Module {
 public:
  // config must pass Validate (TY_CHECK). Weights are drawn from gen, which also drives
  // dropout and must outlive the model (the default generator when null).
  Gpt(const GptConfig& config, Generator* gen);

  // idx: int64 token ids (B, T) with 1 <= T <= context -> logits (B, T, vocab_size).
  Tensor Forward(const Tensor& idx) override;
  // Also checks that every id lies in [0, vocab_size).
  Status CheckInput(const Tensor& idx) const override;

  // The model in parts, for pipeline stages (worker/dist/pipeline.h): Forward(idx) is
  // Head(Blocks(0, n_layer, Embed(idx))).
  Tensor Embed(const Tensor& idx);  // token and position embeddings, dropout: (B, T, C)
  // Blocks begin..end-1, (B, T, C) -> (B, T, C), 0 <= begin <= end <= n_layer (TY_CHECK).
  Tensor Blocks(int64_t begin, int64_t end, const Tensor& x);
  Tensor Head(const Tensor& x);  // the last norm and lm_head: (B, T, vocab_size)

  // nanoGPT's get_num_params(): NumParameters() less the position embeddings.
  int64_t NumNonEmbeddingParameters() const;
  const GptConfig& config() const { return config_; }

 private:
  void InitWeights(Generator* gen);
  // x: (B, T, C) -> (B, T, C), checkpointed per Note [Block checkpointing].
  Tensor ForwardBlock(const std::shared_ptr<Module>& block, const Tensor& x);

  GptConfig config_;
  Generator* gen_;  // dropout's generator, never null; not owned
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::shared_ptr<ModuleList> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> lm_head_;  // its weight is wte_'s (Note [Tied embedding])
};

StatusOr<std::shared_ptr<Module>> BuildGpt(const GptConfig& config, Generator* gen = nullptr);

}  // namespace trainyard::nn
