#include "worker/trainer/pytorch_layouts.h"

#include <map>
#include <utility>

#include "worker/ops/views.h"

namespace trainyard::trainer {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsConv1D(const std::string& name) {
  for (const char* suffix :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    if (EndsWith(name, suffix)) return true;
  }
  return false;
}

bool IsTransposeOf(const Tensor& a, const Tensor& b) {
  return a.dim() == 2 && b.dim() == 2 && a.size(0) == b.size(1) && a.size(1) == b.size(0) &&
         a.size(0) != a.size(1);
}

}  // namespace

nn::NamedTensors FromPyTorchLayouts(nn::NamedTensors file, const nn::Module& model,
                                    std::string* note) {
  std::map<std::string, Tensor> ours;
  for (const auto& [name, t] : model.StateDict()) ours.emplace(name, t);
  bool gpt2 = false;
  for (const auto& [name, t] : file) {
    auto it = ours.find(name);
    if (EndsWith(name, ".attn.c_attn.weight") && it != ours.end() && IsTransposeOf(t, it->second))
      gpt2 = true;
  }
  nn::NamedTensors out;
  int dropped = 0;
  for (auto& [name, t] : file) {
    const bool buffer = EndsWith(name, ".attn.bias") || EndsWith(name, ".attn.masked_bias") ||
                        EndsWith(name, "rotary_emb.inv_freq");
    if (buffer && !ours.count(name)) {
      ++dropped;
      continue;
    }
    if (gpt2 && IsConv1D(name) && t.dim() == 2) t = ops::Contiguous(ops::Transpose(t, 0, 1));
    out.emplace_back(std::move(name), std::move(t));
  }
  if (note != nullptr) {
    *note = gpt2 ? "Hugging Face GPT-2 layout: Conv1D weights transposed" : "";
    if (dropped > 0) {
      *note += std::string(note->empty() ? "" : "; ") + std::to_string(dropped) +
               " attention-mask or rotary buffers dropped";
    }
  }
  return out;
}

}  // namespace trainyard::trainer
