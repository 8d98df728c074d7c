#include "worker/nn/gpt.h"

#include <cmath>
#include <limits>
#include <string>

#include "worker/autograd/checkpoint.h"
#include "worker/nn/activation.h"
#include "worker/nn/init.h"
#include "worker/nn/zoo_util.h"
#include "worker/ops/attention.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/linalg.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {

namespace {

// softmax(q k^T / sqrt(hs) + causal mask): the attention weights, spelled out for the path
// with attention dropout (ops::ScaledDotProductAttention has no dropout).
// q, k: (B, nh, T, hs) -> (B, nh, T, T).
Tensor CausalAttentionWeights(const Tensor& q, const Tensor& k) {
  const int64_t t = q.size(-2);
  Tensor att = ops::MulScalar(ops::Matmul(q, ops::Transpose(k, -2, -1)),
                              1 / std::sqrt(static_cast<double>(q.size(-1))));
  const Tensor pos = Arange(t, Options(DType::kInt64).set_device(q.device()));
  const Tensor future = ops::Gt(ops::Reshape(pos, {1, t}), ops::Reshape(pos, {t, 1}));
  att = ops::MaskedFill(att, future, -std::numeric_limits<double>::infinity());
  return ops::Softmax(att, -1);
}

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GptConfig& c, Generator* gen)
      : Module("CausalSelfAttention"), n_head_(c.n_head), dropout_(c.dropout) {
    c_attn_ =
        RegisterModule("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, c.bias, gen));
    c_proj_ = RegisterModule("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, c.bias, gen));
    attn_dropout_ = RegisterModule("attn_dropout", std::make_shared<Dropout>(c.dropout, gen));
    resid_dropout_ = RegisterModule("resid_dropout", std::make_shared<Dropout>(c.dropout, gen));
  }

  // x: (B, T, C) -> (B, T, C).
  Tensor Forward(const Tensor& x) override {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hs = c / n_head_;
    std::vector<Tensor> qkv = ops::Split(c_attn_->Forward(x), c, 2);  // 3 x (B, T, C)
    auto heads = [&](const Tensor& m) {
      return ops::Transpose(ops::View(m, {b, t, n_head_, hs}), 1, 2);  // (B, nh, T, hs)
    };
    const Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    Tensor y = is_training() && dropout_ > 0
                   ? ops::Matmul(attn_dropout_->Forward(CausalAttentionWeights(q, k)), v)
                   : ops::ScaledDotProductAttention(q, k, v, /*is_causal=*/true);  // (B, nh, T, hs)
    y = ops::Reshape(ops::Transpose(y, 1, 2), {b, t, c});  // heads side by side
    return resid_dropout_->Forward(c_proj_->Forward(y));
  }

 private:
  int64_t n_head_;
  double dropout_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  std::shared_ptr<Dropout> attn_dropout_, resid_dropout_;
};

class GptMlp : public Module {
 public:
  GptMlp(const GptConfig& c, Generator* gen) : Module("MLP") {
    c_fc_ = RegisterModule("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, c.bias, gen));
    gelu_ = RegisterModule("gelu", std::make_shared<GELU>());
    c_proj_ =
        RegisterModule("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, c.bias, gen));
    dropout_ = RegisterModule("dropout", std::make_shared<Dropout>(c.dropout, gen));
  }

  // x: (B, T, C) -> (B, T, C) through (B, T, 4C).
  Tensor Forward(const Tensor& x) override {
    return dropout_->Forward(c_proj_->Forward(gelu_->Forward(c_fc_->Forward(x))));
  }

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<GELU> gelu_;
  std::shared_ptr<Dropout> dropout_;
};

class Block : public Module {
 public:
  Block(const GptConfig& c, Generator* gen) : Module("Block") {
    ln_1_ = RegisterModule(
        "ln_1", std::make_shared<LayerNorm>(std::vector<int64_t>{c.n_embd}, 1e-5, true, c.bias));
    attn_ = RegisterModule("attn", std::make_shared<CausalSelfAttention>(c, gen));
    ln_2_ = RegisterModule(
        "ln_2", std::make_shared<LayerNorm>(std::vector<int64_t>{c.n_embd}, 1e-5, true, c.bias));
    mlp_ = RegisterModule("mlp", std::make_shared<GptMlp>(c, gen));
  }

  // Pre-LayerNorm residual block; x: (B, T, C) -> (B, T, C).
  Tensor Forward(const Tensor& x) override {
    Tensor h = ops::Add(x, attn_->Forward(ln_1_->Forward(x)));
    return ops::Add(h, mlp_->Forward(ln_2_->Forward(h)));
  }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<GptMlp> mlp_;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Status Validate(const GptConfig& config) {
  RETURN_IF_ERROR(internal::CheckAtLeast("gpt.vocab_size", config.vocab_size, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("gpt.context", config.context, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("gpt.n_layer", config.n_layer, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("gpt.n_head", config.n_head, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast("gpt.n_embd", config.n_embd, 1));
  if (config.n_embd % config.n_head != 0) {
    return InvalidArgumentError("gpt.n_head is " + std::to_string(config.n_head) +
                                "; it must divide gpt.n_embd (" + std::to_string(config.n_embd) +
                                ")");
  }
  RETURN_IF_ERROR(internal::CheckProbability("gpt.dropout", config.dropout));
  // Per block: c_attn 3C^2, c_proj C^2, c_fc 4C^2, mlp c_proj 4C^2 weights, 9C biases with
  // bias; two LayerNorms of C (2C with bias). lm_head is tied to wte.
  const double c = static_cast<double>(config.n_embd), b = config.bias ? 1 : 0;
  const double block = 12 * c * c + 9 * c * b + 2 * (c + c * b);
  const double count =
      (static_cast<double>(config.vocab_size) + static_cast<double>(config.context)) * c +
      static_cast<double>(config.n_layer) * block + (c + c * b);
  return internal::CheckParameterCount("gpt", count,
                                       "gpt.vocab_size, gpt.context, gpt.n_layer or gpt.n_embd");
}

Gpt::Gpt(const GptConfig& config, Generator* gen)
    : Module("GPT"), config_(config), gen_(gen != nullptr ? gen : &DefaultGenerator()) {
  const Status valid = Validate(config);
  TY_CHECK(valid.ok()) << valid.message();
  const GptConfig& c = config;
  auto transformer = RegisterModule("transformer", std::make_shared<ModuleDict>());
  wte_ = transformer->Insert("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, gen));
  wpe_ = transformer->Insert("wpe", std::make_shared<Embedding>(c.context, c.n_embd, gen));
  drop_ = transformer->Insert("drop", std::make_shared<Dropout>(c.dropout, gen));
  h_ = transformer->Insert("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h_->Append(std::make_shared<Block>(c, gen));
  ln_f_ = transformer->Insert(
      "ln_f", std::make_shared<LayerNorm>(std::vector<int64_t>{c.n_embd}, 1e-5, true, c.bias));
  lm_head_ = RegisterModule("lm_head", std::make_shared<Linear>(wte_->weight(), Tensor()));
  InitWeights(gen);
}

void Gpt::InitWeights(Generator* gen) {
  Apply([gen](Module& m) {
    if (auto* linear = dynamic_cast<Linear*>(&m)) {
      init::Normal(linear->weight(), 0, 0.02, gen);
      if (linear->bias().defined()) init::Zeros(linear->bias());
    } else if (auto* embedding = dynamic_cast<Embedding*>(&m)) {
      init::Normal(embedding->weight(), 0, 0.02, gen);
    }
  });
  const double std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (const auto& [name, p] : NamedParameters())
    if (EndsWith(name, "c_proj.weight")) init::Normal(p, 0, std, gen);
}

Status Gpt::CheckInput(const Tensor& idx) const {
  if (idx.dim() != 2 || idx.dtype() != DType::kInt64) {
    return InvalidArgumentError("gpt: input is " + idx.shape().ToString() + " " +
                                DTypeName(idx.dtype()) + "; it must be int64 token ids (B, T)");
  }
  if (idx.size(1) < 1 || idx.size(1) > config_.context) {
    return InvalidArgumentError("gpt: sequence length " + std::to_string(idx.size(1)) +
                                " must lie in [1, " + std::to_string(config_.context) +
                                "] (gpt.context)");
  }
  for (int64_t id : ToVector<int64_t>(idx)) {
    if (id < 0 || id >= config_.vocab_size) {
      return InvalidArgumentError("gpt: token id " + std::to_string(id) + " must lie in [0, " +
                                  std::to_string(config_.vocab_size) + ") (gpt.vocab_size)");
    }
  }
  return OkStatus();
}

Tensor Gpt::Forward(const Tensor& idx) {
  TY_CHECK(idx.dim() == 2 && idx.dtype() == DType::kInt64)
      << "GPT: input must be int64 token ids (B, T), got " << idx.shape() << " "
      << DTypeName(idx.dtype());
  const int64_t t = idx.size(1);
  TY_CHECK(t >= 1 && t <= config_.context) << "GPT: cannot forward a sequence of length " << t
                                           << "; the context (block size) is " << config_.context;
  return Head(Blocks(0, config_.n_layer, Embed(idx)));
}

Tensor Gpt::Embed(const Tensor& idx) {
  // Positions 0..t-1 pick wpe's first t rows: a slice, with no index tensor to build, copy to
  // the device and check on the host.
  const int64_t t = idx.size(1);
  Tensor x = ops::Add(wte_->Forward(idx), ops::Narrow(wpe_->weight(), 0, 0, t));  // (B, T, C)
  return drop_->Forward(x);
}

Tensor Gpt::Blocks(int64_t begin, int64_t end, const Tensor& x) {
  TY_CHECK(0 <= begin && begin <= end && end <= config_.n_layer)
      << "GPT: blocks [" << begin << ", " << end << ") of " << config_.n_layer;
  Tensor h = x;
  for (int64_t i = begin; i < end; ++i) h = ForwardBlock(h_->at(static_cast<size_t>(i)), h);
  return h;
}

Tensor Gpt::Head(const Tensor& x) { return lm_head_->Forward(ln_f_->Forward(x)); }

Tensor Gpt::ForwardBlock(const std::shared_ptr<Module>& block, const Tensor& x) {
  if (!config_.activation_checkpointing || !is_training()) return block->Call(x);
  // Every dropout in a block draws from gen_, so replaying gen_ replays the masks. Checkpoint
  // itself falls back to a plain call when grad mode is off. A forward wrapper (ZeRO-3) goes
  // around the checkpoint, so the recomputation in backward finds the parameters gathered.
  autograd::CheckpointOptions options;
  options.generators = {gen_};
  return block->Call(x, [&block, &options](const Tensor& in) {
    return autograd::Checkpoint([block](const Tensor& t) { return block->Forward(t); }, in,
                                options);
  });
}

int64_t Gpt::NumNonEmbeddingParameters() const { return NumParameters() - wpe_->weight().numel(); }

StatusOr<std::shared_ptr<Module>> BuildGpt(const GptConfig& config, Generator* gen) {
  RETURN_IF_ERROR(Validate(config));
  return std::shared_ptr<Module>(std::make_shared<Gpt>(config, gen));
}

}  // namespace trainyard::nn
