#include "worker/nn/graph.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "worker/nn/containers.h"
#include "worker/nn/conv.h"
#include "worker/nn/init.h"
#include "worker/nn/linear.h"
#include "worker/nn/norm.h"
#include "worker/ops/activation.h"
#include "worker/ops/attention.h"
#include "worker/ops/dropout.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/pool.h"
#include "worker/ops/reduction.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {

namespace {

// q, k, v packed in one (B, T, 3C) input or given as three, split into heads (keys and values
// repeated over their query group when kv_heads < heads, as Hugging Face's repeat_kv), then
// scaled dot-product attention, heads side by side again: (B, T, C).
Tensor Attention(const spec::GraphNodeSpec& n, const std::vector<Tensor>& in) {
  Tensor q = in[0], k, v;
  if (in.size() == 1) {
    std::vector<Tensor> qkv = ops::Split(in[0], in[0].size(2) / 3, 2);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    k = in[1], v = in[2];
  }
  const int64_t b = q.size(0), t = q.size(1), c = q.size(2), s = k.size(1);
  const int64_t h = n.heads, kv = n.kv_heads == 0 ? h : n.kv_heads, hs = c / h;
  auto heads = [&](const Tensor& m, int64_t len, int64_t count) {
    return ops::Transpose(ops::Reshape(m, {b, len, count, hs}), 1, 2);  // (B, count, len, hs)
  };
  Tensor qh = heads(q, t, h), kh = heads(k, s, kv), vh = heads(v, s, kv);
  if (kv != h) {
    auto repeat = [&](const Tensor& m) {
      return ops::Reshape(ops::Expand(ops::Unsqueeze(m, 2), {b, kv, h / kv, s, hs}), {b, h, s, hs});
    };
    kh = repeat(kh), vh = repeat(vh);
  }
  const Tensor y = ops::ScaledDotProductAttention(qh, kh, vh, n.causal);  // (B, h, T, hs)
  return ops::Reshape(ops::Transpose(y, 1, 2), {b, t, c});
}

// Rotary position embeddings as Hugging Face's LLaMA applies them (rotate_half): each head's
// first and second halves form the pairs (x1, x2) rotated by position t times the frequency
// theta^(-2i / head size). The tables, (T, 1, hs) to broadcast over batch and heads, are
// computed in float32 as LlamaRotaryEmbedding does, then put on `device` in `dtype`.
GraphModel::RotaryTables MakeRotaryTables(int64_t t, int64_t hs, double theta, Device device,
                                          DType dtype) {
  const int64_t half = hs / 2;
  std::vector<float> cos(static_cast<size_t>(t * hs)), sin(cos.size());
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hs);
    const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), exponent);
    for (int64_t pos = 0; pos < t; ++pos) {
      const float angle = static_cast<float>(pos) * inv_freq;
      for (int64_t at : {pos * hs + i, pos * hs + i + half}) {
        cos[static_cast<size_t>(at)] = std::cos(angle);
        sin[static_cast<size_t>(at)] = std::sin(angle);
      }
    }
  }
  auto table = [&](const std::vector<float>& v) {
    Tensor host = FromVector<float>(v, {t, 1, hs});
    if (!(host.device() == device)) host = CopyToDevice(host, device);
    return ops::To(host, dtype);
  };
  return {table(cos), table(sin)};
}

// x: (B, T, heads x hs) -> the same shape, rotated by MakeRotaryTables' tables for T.
Tensor Rotary(const Tensor& x, int64_t heads, const GraphModel::RotaryTables& tables) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hs = c / heads, half = hs / 2;
  const Tensor h = ops::Reshape(x, {b, t, heads, hs});
  const Tensor rotated =
      ops::Cat({ops::Neg(ops::Narrow(h, 3, half, half)), ops::Narrow(h, 3, 0, half)}, 3);
  const Tensor out = ops::Add(ops::Mul(h, tables.cos), ops::Mul(rotated, tables.sin));
  return ops::Reshape(out, {b, t, c});
}

// A per-sample shape after the batch dimension of x.
Shape Batched(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> full = {x.size(0)};
  full.insert(full.end(), dims.begin(), dims.end());
  return Shape(full);
}

void InitNormal(const Tensor& weight, const Tensor& bias, double std, Generator* gen) {
  if (std <= 0) return;  // PyTorch's default, drawn by the module
  init::Normal(weight, 0, std, gen);
  if (bias.defined()) init::Zeros(bias);
}

}  // namespace

RMSNorm::RMSNorm(int64_t features, double eps) : Module("RMSNorm"), eps_(eps) {
  weight_ = RegisterParameter("weight", Ones({features}));
}

Tensor RMSNorm::Forward(const Tensor& x) {
  const Tensor ms = ops::Mean(ops::Mul(x, x), {-1}, /*keepdim=*/true);
  return ops::Mul(ops::Mul(x, ops::Rsqrt(ops::AddScalar(ms, eps_))), weight_);
}

GraphModel::GraphModel(spec::CompiledGraph graph, Generator* gen)
    : Module("GraphModel"), g_(std::move(graph)), gen_(gen != nullptr ? gen : &DefaultGenerator()) {
  // Made in run order (an owner before the linear that shares its weight), registered in the
  // order the graph is written.
  modules_.resize(g_.ops.size());
  rotary_.resize(g_.ops.size());
  std::vector<size_t> written;
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    modules_[i] = MakeModule(g_.ops[i], gen_);
    if (modules_[i] != nullptr) written.push_back(i);
  }
  std::stable_sort(written.begin(), written.end(),
                   [&](size_t a, size_t b) { return g_.ops[a].key < g_.ops[b].key; });
  for (size_t i : written) Place(g_.ops[i].module, modules_[i]);
}

void GraphModel::Place(const std::string& path, std::shared_ptr<Module> module) {
  Module* parent = this;
  size_t begin = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', begin)) {
    const std::string name = path.substr(begin, dot - begin);
    Module* next = nullptr;
    for (const auto& [child_name, child] : parent->named_children())
      if (child_name == name) next = child.get();
    if (next == nullptr) next = parent->RegisterModule(name, std::make_shared<ModuleDict>()).get();
    parent = next;
    begin = dot + 1;
  }
  parent->RegisterModule(path.substr(begin), std::move(module));
}

std::shared_ptr<Module> GraphModel::MakeModule(const spec::GraphOp& op, Generator* gen) {
  const spec::GraphNodeSpec& n = op.node;
  const std::vector<int64_t>& in = g_.shape_of(op.inputs[0]).dims;
  if (n.op == "linear") {
    const int64_t out = op.shape.dims.back();
    if (op.shared >= 0) {
      Module* owner = modules_[static_cast<size_t>(op.shared)].get();
      const Tensor shared = dynamic_cast<Embedding*>(owner) != nullptr
                                ? static_cast<Embedding*>(owner)->weight()
                                : static_cast<Linear*>(owner)->weight();
      return std::make_shared<Linear>(shared, n.bias ? Zeros({out}) : Tensor());
    }
    auto linear = std::make_shared<Linear>(in.back(), out, n.bias, gen);
    InitNormal(linear->weight(), linear->bias(), n.init_std, gen);
    return linear;
  }
  if (n.op == "embedding" || n.op == "position_embedding") {
    auto embedding = std::make_shared<Embedding>(n.num_embeddings, n.embedding_dim, gen);
    InitNormal(embedding->weight(), Tensor(), n.init_std, gen);
    return embedding;
  }
  if (n.op == "layer_norm")
    return std::make_shared<LayerNorm>(std::vector<int64_t>{in.back()}, n.eps, true, n.bias);
  if (n.op == "rms_norm") return std::make_shared<RMSNorm>(in.back(), n.eps);
  if (n.op == "batch_norm") return std::make_shared<BatchNorm2d>(in[0], n.eps);
  if (n.op == "conv2d") {
    auto conv = std::make_shared<Conv2d>(in[0], n.out_channels, n.kernel_size,
                                         n.stride > 0 ? n.stride : 1, n.padding, 1, 1, n.bias, gen);
    InitNormal(conv->weight(), conv->bias(), n.init_std, gen);
    return conv;
  }
  return nullptr;
}

Tensor GraphModel::Forward(const Tensor& x) {
  std::vector<Tensor> values(g_.ops.size() + 1);
  // A sample of another shape with as many elements (Fashion-MNIST's (1, 28, 28) images for an
  // input of [784]) is viewed as the input's shape.
  values[0] = x.dim() == static_cast<int64_t>(g_.input.dims.size()) + 1
                  ? x
                  : ops::Reshape(x, Batched(x, g_.input.dims));
  for (size_t i = 0; i < g_.ops.size(); ++i) values[i + 1] = Run(i, values);
  return values[static_cast<size_t>(g_.output)];
}

Tensor GraphModel::Run(size_t i, const std::vector<Tensor>& values) {
  const spec::GraphOp& op = g_.ops[i];
  const spec::GraphNodeSpec& n = op.node;
  std::vector<Tensor> in;
  for (int v : op.inputs) in.push_back(values[static_cast<size_t>(v)]);
  const Tensor& x = in[0];
  const std::string& o = n.op;
  if (o == "position_embedding") {
    // Positions 0..T-1 pick the first T rows: a slice, with no index tensor to build.
    return ops::Narrow(static_cast<Embedding*>(modules_[i].get())->weight(), 0, 0, x.size(1));
  }
  if (modules_[i] != nullptr) return modules_[i]->Forward(x);
  if (o == "dropout") return ops::Dropout(x, n.p, is_training(), gen_);
  if (o == "relu") return ops::Relu(x);
  if (o == "gelu") return ops::Gelu(x, n.approximate);
  if (o == "tanh") return ops::Tanh(x);
  if (o == "sigmoid") return ops::Sigmoid(x);
  if (o == "silu") return ops::Silu(x);
  if (o == "add") return ops::Add(x, in[1]);
  if (o == "mul") return ops::Mul(x, in[1]);
  if (o == "concat") return ops::Cat(in, n.dim);
  if (o == "reshape") return ops::Reshape(x, Batched(x, op.shape.dims));
  if (o == "flatten") return ops::Flatten(x, 1);
  if (o == "transpose") return ops::Transpose(x, n.dims[0], n.dims[1]);
  if (o == "softmax") return ops::Softmax(x, n.dim);
  if (o == "attention") return Attention(n, in);
  if (o == "rotary") {
    // The tables depend on T, the device and the dtype only: made once, not every step.
    RotaryTables& tables = rotary_[i];
    if (!tables.cos.defined() || tables.cos.size(0) != x.size(1) ||
        !(tables.cos.device() == x.device()) || tables.cos.dtype() != x.dtype()) {
      tables = MakeRotaryTables(x.size(1), x.size(2) / n.heads, n.theta, x.device(), x.dtype());
    }
    return Rotary(x, n.heads, tables);
  }
  if (o == "max_pool2d") return ops::MaxPool2d(x, n.kernel_size, n.stride, n.padding);
  if (o == "avg_pool2d") return ops::AvgPool2d(x, n.kernel_size, n.stride, n.padding);
  if (o == "adaptive_avg_pool2d") return ops::AdaptiveAvgPool2d(x, 1);
  TY_CHECK(false) << "graph: op " << o << " has no kernel";
  return Tensor();
}

Status GraphModel::CheckInput(const Tensor& x) const {
  const spec::ValueShape& want = g_.input;
  const DType dtype = want.int64 ? DType::kInt64 : DType::kFloat32;
  const bool same = x.dim() == static_cast<int64_t>(want.dims.size()) + 1 &&
                    std::equal(want.dims.begin(), want.dims.end(), x.shape().begin() + 1);
  const bool shape_ok = same || (x.dim() >= 1 && x.numel() == x.size(0) * want.numel());
  if (!shape_ok || x.dtype() != dtype) {
    return InvalidArgumentError("graph: input is " + x.shape().ToString() + " " +
                                DTypeName(x.dtype()) + "; it must be " + want.ToString() + " " +
                                DTypeName(dtype) + " (model.graph.input)");
  }
  if (!want.int64) return OkStatus();
  const std::vector<int64_t> ids = ToVector<int64_t>(x);
  for (const spec::GraphOp& op : g_.ops) {
    if (op.node.op != "embedding") continue;  // every int64 value is the input's ids
    for (int64_t id : ids) {
      if (id < 0 || id >= op.node.num_embeddings) {
        return InvalidArgumentError("graph: token id " + std::to_string(id) + " must lie in [0, " +
                                    std::to_string(op.node.num_embeddings) + ") (" + op.where +
                                    ".num_embeddings)");
      }
    }
  }
  return OkStatus();
}

StatusOr<std::shared_ptr<Module>> BuildGraph(const spec::GraphSpec& graph, Generator* gen) {
  ASSIGN_OR_RETURN(spec::CompiledGraph compiled, spec::CompileGraph(graph));
  return std::shared_ptr<Module>(std::make_shared<GraphModel>(std::move(compiled), gen));
}

}  // namespace trainyard::nn
