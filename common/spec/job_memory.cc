#include "common/spec/job_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <vector>

#include "common/spec/model_graph.h"

namespace trainyard::spec {

// Note [Activation model]
// The engine keeps, from a micro-batch's forward until the matching backward node has run,
// the tensors its ops save (worker/ops: a Linear its input, a ReLU its input, a LayerNorm its
// input and statistics, attention q, k, v and on the CPU the (B, nh, T, T) probabilities, a
// dropout its uint8 mask, cross-entropy the logits). Backward then frees them in reverse order
// while it holds, at each node, the incoming gradient, the gradients it returns, a parameter's
// fresh gradient before it is added into .grad, and a residual stream's gradient waiting for
// its branch. The model below is that timeline: each model is a list of ops, in forward order,
// each with the bytes it saves, the bytes alive only while its forward runs and the bytes alive
// only while its backward runs; the estimate is the timeline's peak (Timeline::Peak), plus the
// batch. Tensors are attributed to the op that keeps them, so one saved by two ops counts once.
//
// Precision (Note [Autocast policy] in worker/autograd/autocast.h): under bf16/fp16 a product
// (linear, conv, matmul, attention) saves copies of its inputs and of its weight in the
// autocast dtype. On the CPU the copies are rounded but float32 (4 bytes: bf16 costs a copy
// of every weight on the CPU); on CUDA they are 2 bytes, and so are the products' outputs and
// what elementwise ops compute from them; norms, softmax and losses compute in float32.
//
// Attention: on the CPU the fused kernel keeps the (B, nh, T, T) probabilities; on CUDA the
// fused kernel keeps only a log-sum-exp per row, for head sizes up to kCudaFusedHeadSize (the
// kernel's shared-memory limit; some GPUs take less); above that, and in training with
// gpt.dropout > 0 on any device, attention is composed of ops that keep T x T tensors.
//
// Gradients count whole beside the activations: a one-process run frees them at zero_grad, but
// the caching allocator keeps their blocks, which activations of other sizes cannot reuse (so
// the process's memory is the sum, although the allocated peak can be less: backward frees
// activations as it makes gradients). A parameter's fresh gradient is extra only where .grad
// persists through backward and the fresh one is added into it: data parallel (the buckets)
// and micro-batches after the first (grad_accumulation_steps > 1); otherwise it becomes .grad.
// Evaluation (no graph, eval.batch_size) counts when its peak is higher.
//
// What is left out: kernel scratch outside tensors (the CPU convolution's im2col rows), the
// data loader's prefetched batches, and allocator rounding (the CPU allocator's quarter-power-
// of-two size classes add about 10%). tests/worker/trainer/job_memory_test.cc holds the
// activations within [0.8, 1.25] of the CPU allocator's measured peak for every zoo model
// (0.87 to 1.07 measured, the low end being that rounding), and the whole estimate within
// [0.8, 1.5] of a one-process step's peak and of the Trainer's.

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
// Fashion-MNIST, the only image data, is 28x28; the ResNet takes its size from the data.
constexpr int64_t kImageSize = 28;
// The largest head size the CUDA fused attention kernel takes (ops::ScaledDotProductAttention).
constexpr int64_t kCudaFusedHeadSize = 128;
// ZeRO-2's bucket buffers alive at once: dist::kLiveBuckets launched and two being filled (one
// op's gradients, a weight's and its bias's, can straddle a bucket boundary).
constexpr size_t kLiveBucketsAtOnce = 4;

int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? kMax : r;
}

int64_t SatMul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kMax : r;
}

// A count computed in double (which cannot overflow), clamped to [0, INT64_MAX].
int64_t Clamp(double bytes) {
  if (!(bytes > 0)) return 0;
  return bytes >= 0x1p63 ? kMax : static_cast<int64_t>(bytes);
}

// Bytes per element of what the ops keep, from spec.precision and spec.device, and of a
// parameter's fresh gradient beside its .grad.
struct Precision {
  double out = 4;       // a product's output, and what elementwise ops compute from it
  double in = 4;        // the input a product keeps (a copy under autocast)
  double w = 0;         // the weight copy a product keeps: 0 without autocast
  double fresh = 0;     // 4 where .grad persists through backward, else 0 (the fresh one is it)
  bool copies = false;  // autocast copies float32 inputs, even ones another op keeps
  bool cuda = false;
};

Precision PrecisionOf(const JobSpec& spec) {
  Precision p;
  p.cuda = spec.device == "cuda";
  const ParallelismSpec& par = spec.parallelism;
  p.fresh = par.world_size > 1 || par.grad_accumulation_steps > 1 ? 4 : 0;
  if (spec.precision != "bf16" && spec.precision != "fp16") return p;
  p.copies = true;
  p.out = p.cuda ? 2 : 4;
  p.in = p.cuda ? 2 : 4;
  p.w = p.cuda ? 2 : 4;
  return p;
}

// See Note [Activation model].
class Timeline {
 public:
  void Op(double saved, double forward, double backward) {
    ops_.push_back({saved, forward, backward});
  }
  // `block`'s ops `times` times over (times >= 1). Only the last repetition can set the peak
  // (the earlier ones run with less alive), so the others count as what they keep.
  void Repeat(const Timeline& block, double times) {
    if (times < 1) return;
    double saved = 0;
    for (const Step& s : block.ops_) saved += s.saved;
    Op((times - 1) * saved, 0, 0);
    ops_.insert(ops_.end(), block.ops_.begin(), block.ops_.end());
  }
  // The most bytes alive at once: the ops' forwards in order, then their backwards in reverse.
  double Peak() const {
    double live = 0, peak = 0;
    for (const Step& s : ops_) {
      live += s.saved;
      peak = std::max(peak, live + s.forward);
    }
    for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
      peak = std::max(peak, live + it->backward);
      live -= it->saved;
    }
    return peak;
  }

 private:
  struct Step {
    double saved, forward, backward;
  };
  std::vector<Step> ops_;
};

// ---- Parameters, in the order of the model's NamedParameters() ------------------------------

void AddLinear(std::vector<int64_t>* sizes, int64_t in, int64_t out, bool bias) {
  sizes->push_back(SatMul(in, out));
  if (bias) sizes->push_back(out);
}

std::vector<int64_t> MlpParameters(const MlpSpec& m) {
  std::vector<int64_t> sizes;
  for (size_t i = 0; i + 1 < m.sizes.size(); ++i)
    AddLinear(&sizes, m.sizes[i], m.sizes[i + 1], true);
  return sizes;
}

std::vector<int64_t> CnnParameters(const CnnSpec& c) {
  const int64_t side = c.image_size / 2 / 2;
  std::vector<int64_t> sizes;
  AddLinear(&sizes, SatMul(c.in_channels, 9), c.channels1, true);
  AddLinear(&sizes, SatMul(c.channels1, 9), c.channels2, true);
  AddLinear(&sizes, SatMul(c.channels2, SatMul(side, side)), c.hidden, true);
  AddLinear(&sizes, c.hidden, c.num_classes, true);
  return sizes;
}

// BasicBlock: conv1, bn1, conv2, bn2 and, when the shape changes, downsample (conv 1x1, bn).
std::vector<int64_t> ResNetParameters(const ResNetSpec& r) {
  const int64_t w = r.base_width;
  std::vector<int64_t> sizes = {SatMul(SatMul(r.in_channels, w), 9), w, w};
  int64_t inplanes = w;
  for (size_t stage = 0; stage < r.blocks.size(); ++stage) {
    const int64_t planes = SatMul(w, int64_t{1} << std::min<size_t>(stage, 40));
    for (int64_t b = 0; b < r.blocks[stage]; ++b) {
      const int64_t in = b == 0 ? inplanes : planes;
      const bool downsample = (stage > 0 && b == 0) || in != planes;
      for (int64_t n : {SatMul(SatMul(in, planes), 9), planes, planes,
                        SatMul(SatMul(planes, planes), 9), planes, planes})
        sizes.push_back(n);
      if (downsample) {
        for (int64_t n : {SatMul(in, planes), planes, planes}) sizes.push_back(n);
      }
    }
    inplanes = planes;
  }
  AddLinear(&sizes, inplanes, r.num_classes, true);
  return sizes;
}

// transformer.wte, wpe, h.i.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f;
// lm_head.weight is wte's (Note [Tied embedding] in worker/nn/gpt.h).
std::vector<int64_t> GptParameters(const GptSpec& g, int64_t vocab) {
  const int64_t c = g.n_embd;
  std::vector<int64_t> sizes = {SatMul(vocab, c), SatMul(g.context, c)};
  auto norm = [&] {
    sizes.push_back(c);
    if (g.bias) sizes.push_back(c);
  };
  for (int64_t layer = 0; layer < g.n_layer; ++layer) {
    norm();
    AddLinear(&sizes, c, SatMul(3, c), g.bias);
    AddLinear(&sizes, c, c, g.bias);
    norm();
    AddLinear(&sizes, c, SatMul(4, c), g.bias);
    AddLinear(&sizes, SatMul(4, c), c, g.bias);
  }
  norm();
  return sizes;
}

int64_t GptVocab(const GptSpec& g, int64_t data_vocab) {
  return g.vocab_size > 0 ? g.vocab_size : std::max<int64_t>(data_vocab, 1);
}

// A model graph's program (model.graph, model.llama), compiled once per estimate; nothing for
// the other models.
std::optional<CompiledGraph> CompiledModelGraph(const ModelSpec& m, int64_t vocab) {
  std::optional<GraphSpec> graph = ModelGraph(m, vocab);
  if (!graph) return std::nullopt;
  StatusOr<CompiledGraph> g = CompileGraph(*graph);
  if (!g.ok()) return std::nullopt;
  return std::move(g).value();
}

// `graph`: the model's CompiledModelGraph, if it is one.
std::vector<int64_t> ParameterSizes(const JobSpec& spec, int64_t vocab,
                                    const CompiledGraph* graph) {
  const ModelSpec& m = spec.model;
  if (m.arch == "mlp") return MlpParameters(m.mlp);
  if (m.arch == "cnn") return CnnParameters(m.cnn);
  if (m.arch == "resnet") return ResNetParameters(m.resnet);
  if (m.arch == "gpt") return GptParameters(m.gpt, GptVocab(m.gpt, vocab));
  if (graph != nullptr) {
    std::vector<int64_t> sizes;
    for (const GraphOp& op : graph->ops)
      if (op.parameters > 0) sizes.push_back(op.parameters);
    return sizes;
  }
  return {};
}

// A graph's activations: in training every op's output is kept for backward (and each
// attention's weights, T x S per head); in evaluation the batch and the widest op's input and
// output live at once.
double GraphActivations(const CompiledGraph& g, double n, bool train) {
  double kept = 0, widest = 0;
  for (const GraphOp& op : g.ops) {
    double out = 4 * n * static_cast<double>(op.shape.numel());
    if (op.node.op == "attention") {  // (heads, T, S) weights
      const int64_t t = op.shape.dims[0], keys = g.shape_of(op.inputs.back()).dims[0];
      out += 4 * n * static_cast<double>(op.node.heads) * static_cast<double>(t * keys);
    }
    kept += out;
    widest = std::max(widest, out + 4 * n * static_cast<double>(g.shape_of(op.inputs[0]).numel()));
  }
  const double batch = 8 * n * static_cast<double>(g.input.numel());
  return batch + (train ? kept : widest);
}

// Batch norm's running mean and variance (float32) and its int64 step count, per layer.
int64_t BufferBytes(const JobSpec& spec) {
  if (spec.model.arch != "resnet") return 0;
  const ResNetSpec& r = spec.model.resnet;
  int64_t bytes = SatMul(8, r.base_width) + 8;  // bn1
  for (size_t stage = 0; stage < r.blocks.size(); ++stage) {
    const int64_t planes = SatMul(r.base_width, int64_t{1} << std::min<size_t>(stage, 40));
    const int64_t norms = SatAdd(SatMul(2, r.blocks[stage]), stage > 0 ? 1 : 0);
    bytes = SatAdd(bytes, SatMul(norms, SatAdd(SatMul(8, planes), 8)));
  }
  return bytes;
}

// ---- Gradients and optimizer state ----------------------------------------------------------

// The elements of each of the Reducer's buckets, before padding: dist::PlanBuckets over the
// parameters in reverse order, the first bucket capped at first_bucket_size_mb, the others at
// bucket_size_mb (one float32 bucket list: every zoo parameter is float32).
std::vector<int64_t> BucketElements(const std::vector<int64_t>& sizes, const ParallelismSpec& p) {
  const auto bytes_of = [](double mb) { return static_cast<int64_t>(mb * (1 << 20)); };
  const int64_t first_cap = bytes_of(p.first_bucket_size_mb), cap = bytes_of(p.bucket_size_mb);
  std::vector<int64_t> buckets;
  int64_t filled = 0;  // bytes in buckets.back()
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int64_t bytes = SatMul(*it, 4);
    const int64_t limit = buckets.size() == 1 ? first_cap : cap;
    if (buckets.empty() || SatAdd(filled, bytes) > limit) {
      buckets.push_back(0);
      filled = 0;
    }
    buckets.back() = SatAdd(buckets.back(), *it);
    filled = SatAdd(filled, bytes);
  }
  return buckets;
}

// ZeRO-3's units (Note [Unit wrappers] in worker/dist/fsdp.h), their elements: the root first
// (a GPT's embeddings and final norm, an MLP's last layer, any other model whole), then each
// GPT block or each MLP layer but the last.
std::vector<int64_t> UnitElements(const JobSpec& spec, const std::vector<int64_t>& sizes) {
  const ModelSpec& model = spec.model;
  std::vector<int64_t> units(1, 0);
  size_t per_unit = 0, first = 0, count = 0;  // sizes[first + i * per_unit ...] is unit i + 1
  if (model.arch == "gpt" && model.gpt.n_layer > 0) {
    const size_t norm = model.gpt.bias ? 2 : 1;
    first = 2;  // wte, wpe
    count = static_cast<size_t>(model.gpt.n_layer);
    per_unit = (sizes.size() - first - norm) / count;
  } else if (model.arch == "mlp" && sizes.size() >= 2) {
    per_unit = 2;  // weight, bias
    count = sizes.size() / 2 - 1;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool in_unit = i >= first && i < first + per_unit * count;
    const size_t u = in_unit ? 1 + (i - first) / per_unit : 0;
    if (u >= units.size()) units.resize(u + 1, 0);
    units[u] = SatAdd(units[u], sizes[i]);
  }
  return units;
}

// The sum of the `n` largest of `v` (after the first `skip`).
int64_t Largest(std::vector<int64_t> v, size_t n, size_t skip = 0) {
  std::sort(v.begin() + static_cast<std::ptrdiff_t>(std::min(skip, v.size())), v.end(),
            std::greater<int64_t>());
  int64_t sum = 0;
  for (size_t i = skip; i < v.size() && i < skip + n; ++i) sum = SatAdd(sum, v[i]);
  return sum;
}

// Optimizer state bytes per parameter element: Adam's two moments, SGD's momentum buffer.
int64_t OptimizerBytesPerElement(const OptimizerSpec& o) {
  if (o.kind == "adam" || o.kind == "adamw") return 8;
  if (o.kind == "sgd") return o.sgd.momentum != 0 ? 4 : 0;
  return 0;
}

std::string OptimizerName(const OptimizerSpec& o) {
  if (o.kind == "sgd") return o.sgd.momentum != 0 ? "sgd with momentum" : "sgd";
  return o.kind;
}

// Fills gradients_bytes and optimizer_bytes. Data parallel: each bucket's buffer is padded to
// a multiple of the world size; ZeRO-1 keeps one chunk of it per rank as the averaged shard and
// runs the optimizer over that chunk alone (worker/dist/zero.h). ZeRO-2 keeps no whole buffers
// (Note [Released buckets] in worker/dist/reducer.h): the shards and the buckets alive at once
// (the largest ones are counted); its optimizer keeps a master chunk of the weights per
// bucket, counted with the optimizer state. ZeRO-3's buckets are its units (UnitElements),
// and it holds the weights sharded too (its optimizer's masters are the shards).
void SetGradientsAndOptimizer(const JobSpec& spec, const std::vector<int64_t>& sizes,
                              int64_t parameters, MemoryEstimate* m) {
  const ParallelismSpec& p = spec.parallelism;
  const int64_t per_element = OptimizerBytesPerElement(spec.optimizer);
  if (p.world_size <= 1) {
    m->gradients_bytes = SatMul(parameters, 4);
    m->optimizer_bytes = SatMul(parameters, per_element);
    return;
  }
  const int64_t world = p.world_size;
  int64_t padded = 0, chunks = 0;
  std::vector<int64_t> bucket_sizes;  // padded; ZeRO-3's buckets are its units, the root first
  for (int64_t n : p.zero_stage == 3 ? UnitElements(spec, sizes) : BucketElements(sizes, p)) {
    const int64_t chunk = n / world + (n % world != 0 ? 1 : 0);
    bucket_sizes.push_back(SatMul(chunk, world));
    padded = SatAdd(padded, bucket_sizes.back());
    chunks = SatAdd(chunks, chunk);
  }
  const bool zero = p.zero_stage >= 1;
  // The whole buffers (ZeRO-2 and -3: those alive at once) and, compressed, their copies.
  const int64_t buffers = p.zero_stage >= 2 ? Largest(bucket_sizes, kLiveBucketsAtOnce) : padded;
  int64_t grads = SatMul(buffers, 4);
  if (zero) grads = SatAdd(grads, SatMul(chunks, 4));
  if (p.grad_compression == "bf16" || p.grad_compression == "fp16")
    grads = SatAdd(grads, SatMul(buffers, 2));
  m->gradients_bytes = grads;
  m->optimizer_bytes = SatMul(zero ? chunks : parameters, per_element);
  if (p.zero_stage == 2) m->optimizer_bytes = SatAdd(m->optimizer_bytes, SatMul(chunks, 4));
  // ZeRO-3: the weights' shards and the units gathered at once: the root (through the whole
  // forward and backward) and two others (the one running and the next, prefetched).
  if (p.zero_stage == 3) {
    const int64_t gathered = SatAdd(bucket_sizes.front(), Largest(bucket_sizes, 2, /*skip=*/1));
    m->weights_bytes = SatAdd(SatMul(SatAdd(chunks, gathered), 4), BufferBytes(spec));
  }
}

// ---- Activations: the zoo's models as timelines (Note [Activation model]) --------------------

// A Linear or convolution of `in` input elements, `out` output elements and `weights` weight
// elements (with `bias` bias elements): keeps its input (`keeps_input`: false where the op that
// made it already counts it) and, under autocast, its weight's copy; backward holds the
// incoming gradient, the input's (unless `input_grad` is false) and the weight's gradient (in
// the autocast dtype, then float32) where it is not .grad itself.
void Product(Timeline* t, const Precision& p, double in, double out, double weights, double bias,
             bool keeps_input, bool input_grad, double held = 0) {
  const double saved = (keeps_input ? p.in * in : 0) + p.w * weights;
  const double backward = p.out * out + (input_grad ? p.out * in : 0) + (p.fresh + p.w) * weights +
                          p.fresh * bias + held;
  // On the CPU autocast rounds through a 16-bit copy, which lives while the op runs.
  t->Op(saved, p.copies && !p.cuda ? 2 * (in + weights) : 0, backward);
}

// An elementwise op on n elements that keeps its input (and its output when `keeps_output`).
void Elementwise(Timeline* t, const Precision& p, double n, bool keeps_output, double held = 0) {
  t->Op(p.out * n * (keeps_output ? 2 : 1), p.out * n, 2 * p.out * n + held);
}

// Dropout on n elements: keeps its uint8 mask; its input dies once the output is made.
void DropoutOp(Timeline* t, const Precision& p, double n, double held = 0) {
  t->Op(n, p.out * n + 4 * n, 2 * p.out * n + 4 * n + held);
}

// Cross-entropy over rows x classes logits, which it keeps with a log-sum-exp per row.
void Loss(Timeline* t, const Precision& p, double rows, double classes) {
  t->Op(p.out * rows * classes + 4 * rows, 4 * rows, p.out * rows * classes + 8 * rows);
}

double MlpActivations(const MlpSpec& m, const Precision& p, double n) {
  const std::vector<int64_t>& s = m.sizes;
  if (s.size() < 2) return 0;
  Timeline t;
  t.Op(4 * n * s[0] + 8 * n, 0, 0);  // the batch: images and labels
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const double in = n * s[i], out = n * s[i + 1];
    // The first layer's input is the batch: kept as it is, or copied under autocast. A tanh
    // keeps its output, which is the next layer's input: autocast on the CPU copies it again.
    const bool tanh_out = m.activation == "tanh" && m.dropout == 0;
    const bool keeps = i == 0 ? p.copies : !tanh_out || (p.copies && !p.cuda);
    Product(&t, p, in, out, static_cast<double>(s[i]) * s[i + 1], s[i + 1], keeps, i > 0);
    if (i + 2 == s.size()) break;
    Elementwise(&t, p, out, m.activation == "tanh");
    if (m.dropout > 0) DropoutOp(&t, p, out);
  }
  Loss(&t, p, n, s.back());
  return t.Peak();
}

// conv 3x3 -> relu -> max-pool 2: the pool keeps its int64 arg-max; the relu's output dies.
void ConvStage(Timeline* t, const Precision& p, double n, double c_in, double c_out, double side,
               bool first) {
  const double in = n * c_in * side * side, out = n * c_out * side * side;
  const double pooled = n * c_out * std::floor(side / 2) * std::floor(side / 2);
  // The first convolution keeps the batch (counted) and no weight (the input needs no gradient).
  Product(t, p, in, out, first ? 0 : c_in * c_out * 9, c_out, !first || p.copies, !first);
  if (first) t->Op(0, 0, p.fresh * c_in * c_out * 9);
  t->Op(p.out * out, p.out * out, 2 * p.out * out);  // relu
  t->Op(8 * pooled, 0, p.out * (pooled + out));      // pool
}

double CnnActivations(const CnnSpec& c, const Precision& p, double n) {
  Timeline t;
  const double s = static_cast<double>(c.image_size);
  t.Op(4 * n * c.in_channels * s * s + 8 * n, 0, 0);  // the batch
  ConvStage(&t, p, n, c.in_channels, c.channels1, s, true);
  ConvStage(&t, p, n, c.channels1, c.channels2, std::floor(s / 2), false);
  const double side = std::floor(std::floor(s / 2) / 2);
  const double features = c.channels2 * side * side, hidden = n * c.hidden;
  Product(&t, p, n * features, hidden, features * c.hidden, c.hidden, true, true);
  Elementwise(&t, p, hidden, false);
  if (c.dropout > 0) DropoutOp(&t, p, hidden);
  Product(&t, p, hidden, n * c.num_classes, c.hidden * c.num_classes, c.num_classes, true, true);
  Loss(&t, p, n, c.num_classes);
  return t.Peak();
}

// Batch norm keeps its input in float32 (a copy of a 16-bit one) and makes float32.
void BatchNormOp(Timeline* t, double e, double held) { t->Op(4 * e, 4 * e, 8 * e + held); }

// torchvision's BasicBlock (worker/nn/resnet.cc): relu(bn2(conv2(relu(bn1(conv1(x))))) + x'),
// x' = downsample(x) or x. The block's input is counted here (conv1 keeps it; downsample keeps
// the same tensor, or under autocast its own copy). While the main branch runs backward, the
// identity branch's gradient waits for it.
void BasicBlockOps(Timeline* t, const Precision& p, double n, double in_c, double c, double in_s,
                   double s, bool downsample) {
  const double e_in = n * in_c * in_s * in_s, e = n * c * s * s;
  const double held = 4 * e_in;
  Product(t, p, e_in, e, 9 * in_c * c, 0, true, true, held);
  BatchNormOp(t, e, held);
  t->Op(4 * e, 4 * e, 8 * e + held);  // relu
  Product(t, p, e, e, 9 * c * c, 0, true, true, held);
  BatchNormOp(t, e, held);
  if (downsample) {
    Product(t, p, e_in, e, in_c * c, 0, p.copies, true);
    BatchNormOp(t, e, 0);
  }
  t->Op(4 * e, 8 * e, 8 * e);  // add, relu (which keeps the sum)
}

double ResNetActivations(const ResNetSpec& r, const Precision& p, double n) {
  Timeline t;
  const double w = static_cast<double>(r.base_width);
  double s = kImageSize;
  t.Op(4 * n * r.in_channels * s * s + 8 * n, 0, 0);  // the batch
  const double stem = n * w * s * s;
  Product(&t, p, n * r.in_channels * s * s, stem, 0, 0, p.copies, false);
  t.Op(0, 0, p.fresh * r.in_channels * w * 9);
  BatchNormOp(&t, stem, 0);
  t.Op(4 * stem, 4 * stem, 8 * stem);  // relu
  double in_c = w;
  for (size_t stage = 0; stage < r.blocks.size(); ++stage) {
    const double c = w * std::pow(2.0, static_cast<double>(stage));
    for (int64_t b = 0; b < r.blocks[stage]; ++b) {
      const bool first = b == 0;
      const double out_s = first && stage > 0 ? std::floor((s - 1) / 2) + 1 : s;
      BasicBlockOps(&t, p, n, first ? in_c : c, c, s, out_s, first && (stage > 0 || in_c != c));
      s = out_s;
    }
    in_c = c;
  }
  // The last block's output dies in the average pool; fc keeps the pooled features.
  t.Op(0, 4 * n * in_c * s * s, 4 * n * in_c * (s * s + 1));
  Product(&t, p, n * in_c, n * r.num_classes, in_c * r.num_classes, r.num_classes, true, true);
  Loss(&t, p, n, r.num_classes);
  return t.Peak();
}

struct GptDims {
  double b, t, c, heads, vocab;
  double rows() const { return b * t; }
  double scores() const { return b * heads * t * t; }  // elements of one (B, nh, T, T) tensor
};

GptDims GptDimsOf(const GptSpec& g, double batch, int64_t data_vocab) {
  return {batch, static_cast<double>(g.context), static_cast<double>(g.n_embd),
          static_cast<double>(g.n_head), static_cast<double>(GptVocab(g, data_vocab))};
}

// Causal self-attention from the c_attn output (q, k, v) to the (B, T, C) input of c_proj.
void AttentionOps(Timeline* t, const Precision& p, const GptDims& d, bool dropout, double held) {
  const double a = d.rows() * d.c, sc = d.scores();
  const bool cuda_fused = p.cuda && !dropout && d.c / d.heads <= kCudaFusedHeadSize;
  if (cuda_fused) {  // q, k, v and the output where they lie, a log-sum-exp per row
    t->Op(p.out * 4 * a + 4 * d.b * d.heads * d.t, 0, p.out * 4 * a + held);
    return;
  }
  // q, k, v: views of c_attn's output, or autocast's copies (the output dies after forward).
  const double qkv = (p.copies && !p.cuda ? 4 : p.out) * 3 * a;
  // Backward: the incoming gradient and its contiguous copy, q, k and v's gradients, then
  // their (B, T, 3C) concatenation.
  if (!dropout && !p.cuda) {  // the CPU fused kernel keeps the probabilities (float32)
    t->Op(qkv + 4 * sc, p.out * 4 * a, 6 * p.out * a + held);
  } else {  // composed: softmax keeps its float32 output, dropout its mask, the product its
            // input; the (T, T) causal mask is kept too. Backward holds about two float32
            // (B, nh, T, T) gradients beyond what it has freed by then.
    const double kept = 4 + (dropout ? 1 : 0) + (p.copies ? p.in : dropout ? 4 : 0);
    t->Op(qkv + kept * sc + d.t * d.t, 8 * sc, 8 * sc + 6 * p.out * a + held);
  }
  // Heads side by side: a copy (B, T, C), which c_proj keeps.
  t->Op(p.in * a, p.out * a, 2 * p.out * a + held);
}

// LayerNorm over C keeps its float32 input and a mean and 1/std per row; makes float32.
void LayerNormOp(Timeline* t, const GptDims& d, double held) {
  const double a = d.rows() * d.c;
  t->Op(4 * a + 8 * d.rows(), 4 * a, 8 * a + held);
}

// One GPT block; `held` is what stays alive under all of its backward (the tied embedding's
// gradient). Each branch's backward also holds the residual stream's gradient.
Timeline GptBlock(const Precision& p, const GptDims& d, bool dropout, bool bias, double held) {
  Timeline t;
  const double a = d.rows() * d.c, c = d.c, nb = bias ? 1 : 0;
  const double h = held + 4 * a;
  LayerNormOp(&t, d, h);
  Product(&t, p, a, 3 * a, 3 * c * c, 3 * c * nb, true, true, h);
  AttentionOps(&t, p, d, dropout, h);
  Product(&t, p, a, a, c * c, c * nb, false, true, h);
  if (dropout) DropoutOp(&t, p, a, h);
  LayerNormOp(&t, d, h);  // keeps the residual sum h = x + attn(...)
  Product(&t, p, a, 4 * a, 4 * c * c, 4 * c * nb, true, true, h);
  Elementwise(&t, p, 4 * a, false, h);  // gelu
  Product(&t, p, 4 * a, a, 4 * c * c, c * nb, true, true, h);
  if (dropout) DropoutOp(&t, p, a, h);
  return t;
}

// The most a GPT block holds at once without a graph (evaluation, checkpointed forward): its
// input, the residual sum and the temporaries of one branch's expression.
double GptBlockNoGrad(const Precision& p, const GptDims& d, bool dropout) {
  const double a = d.rows() * d.c, sc = d.scores();
  const bool cpu_copies = p.copies && !p.cuda;
  double probs = 4 * sc;  // the CPU fused kernel's
  if (dropout) {
    probs = (2 * p.out + 9) * sc;
  } else if (p.cuda) {
    probs = d.c / d.heads <= kCudaFusedHeadSize ? 0 : (2 * p.out + 8) * sc;
  }
  const double attention = 8 * a + 4 * p.out * a + (cpu_copies ? 12 * a : 0) + probs;
  const double mlp = 16 * a + 9 * p.out * a + (cpu_copies ? 20 * a : 0);
  return std::max(attention, mlp);
}

// A block under activation checkpointing: forward (without a graph) keeps only its input;
// backward recomputes the block's graph and runs it, holding the incoming gradient, while the
// input's gradient accumulates.
void CheckpointedBlock(Timeline* t, const Precision& p, const GptDims& d, bool dropout, bool bias,
                       double held) {
  const double a = d.rows() * d.c;
  const Timeline block = GptBlock(p, d, dropout, bias, held);
  // The recomputed block's first op keeps this same input: counted once.
  t->Op(4 * a, GptBlockNoGrad(p, d, dropout) - 4 * a, block.Peak() + 4 * a);
}

double GptTrainActivations(const JobSpec& spec, const Precision& p, const GptDims& d) {
  const GptSpec& g = spec.model.gpt;
  const bool dropout = g.dropout > 0;
  // lm_head's gradient of the tied weight waits for wte's (beside .grad, or as it).
  const double a = d.rows() * d.c, tied = p.fresh * d.vocab * d.c;
  Timeline t;
  t.Op(16 * d.rows(), 0, 0);  // the batch: token ids and targets (int64)
  // Token + position embeddings (the sum is the first block's input), dropout.
  // Backward: the incoming gradient, wte's (added into lm_head's, waiting) and wpe's.
  t.Op(dropout ? d.rows() * d.c : 0, 4 * a + (dropout ? 8 * a : 0),
       4 * a + tied + 4 * d.vocab * d.c + p.fresh * d.t * d.c);
  Timeline block;
  if (spec.parallelism.activation_checkpointing) {
    CheckpointedBlock(&block, p, d, dropout, g.bias, tied);
  } else {
    block = GptBlock(p, d, dropout, g.bias, tied);
  }
  t.Repeat(block, static_cast<double>(g.n_layer));
  LayerNormOp(&t, d, tied);
  Product(&t, p, a, d.rows() * d.vocab, d.vocab * d.c, 0, true, true);
  Loss(&t, p, d.rows(), d.vocab);
  return t.Peak();
}

// Evaluation: no graph; the batch, one block's temporaries or the head: the last block's
// output, ln_f's, the logits (with lm_head's autocast copies) and the arg-max.
double GptEvalActivations(const Precision& p, const GptDims& d) {
  const double a = d.rows() * d.c;
  const double copies = p.copies ? p.in * a + p.w * d.vocab * d.c : 0;
  const double head = 8 * a + copies + p.out * d.rows() * d.vocab + 24 * d.rows();
  return 16 * d.rows() + std::max(GptBlockNoGrad(p, d, false), head);
}

// Evaluation of the other models: the batch and the widest layer's temporaries: an MLP layer's
// input, output and activation; the CNN's first stage (convolution, relu, pool and its
// int64 arg-max); a ResNet stem-width block (input, convolution, norm, relu, residual).
double EvalActivations(const JobSpec& spec, double n) {
  const ModelSpec& m = spec.model;
  double batch = 0, widest = 0;
  if (m.arch == "mlp" && !m.mlp.sizes.empty()) {
    const std::vector<int64_t>& s = m.mlp.sizes;
    batch = 4 * n * s.front();
    for (size_t i = 0; i + 1 < s.size(); ++i)  // the first layer's input is the batch
      widest = std::max(widest, 4 * n * ((i > 0 ? s[i] : 0) + 2.0 * s[i + 1]));
  } else if (m.arch == "cnn") {
    const double s = static_cast<double>(m.cnn.image_size);
    batch = 4 * n * m.cnn.in_channels * s * s;
    widest = 11 * n * m.cnn.channels1 * s * s;
  } else if (m.arch == "resnet") {
    batch = 4 * n * m.resnet.in_channels * kImageSize * kImageSize;
    widest = 20 * n * m.resnet.base_width * kImageSize * kImageSize;
  }
  return batch + 8 * n + widest;
}

double TrainActivations(const JobSpec& spec, const Precision& p, double n, int64_t vocab,
                        const CompiledGraph* graph) {
  const ModelSpec& m = spec.model;
  if (m.arch == "mlp") return MlpActivations(m.mlp, p, n);
  if (m.arch == "cnn") return CnnActivations(m.cnn, p, n);
  if (m.arch == "resnet") return ResNetActivations(m.resnet, p, n);
  if (m.arch == "gpt") return GptTrainActivations(spec, p, GptDimsOf(m.gpt, n, vocab));
  if (graph != nullptr) return GraphActivations(*graph, n, /*train=*/true);
  return 0;
}

double EvalPeak(const JobSpec& spec, const Precision& p, double n, int64_t vocab,
                const CompiledGraph* graph) {
  const ModelSpec& m = spec.model;
  if (graph != nullptr) return GraphActivations(*graph, n, /*train=*/false);
  if (m.arch != "gpt") return EvalActivations(spec, n);
  return GptEvalActivations(p, GptDimsOf(m.gpt, n, vocab));
}

std::string BatchName(const JobSpec& spec) {
  std::string s = "batch " + std::to_string(spec.batch_size);
  const int64_t t = SequenceLength(spec.model);
  if (t > 0) s += " x context " + std::to_string(t);
  return s;
}

}  // namespace

int64_t MemoryEstimate::total_bytes() const {
  return SatAdd(SatAdd(weights_bytes, gradients_bytes), SatAdd(optimizer_bytes, activations_bytes));
}

std::string FormatBytes(int64_t bytes) {
  if (bytes == kMax) return "more than 8 EiB";
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) v /= 1024, ++unit;
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%lld bytes", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

std::string MemoryEstimate::Describe() const {
  const int64_t total = total_bytes();
  std::string s = (total == kMax ? "" : "about ") + FormatBytes(total) + " per rank: weights " +
                  FormatBytes(weights_bytes) + ", gradients " + FormatBytes(gradients_bytes) +
                  ", optimizer state " + FormatBytes(optimizer_bytes);
  if (!optimizer.empty()) s += " (" + optimizer + ")";
  s += ", activations " + FormatBytes(activations_bytes);
  if (!batch.empty()) s += " (" + batch + ")";
  return s;
}

MemoryEstimate EstimateRankMemory(const JobSpec& spec, int64_t vocab_size) {
  MemoryEstimate m;
  const std::optional<CompiledGraph> compiled = CompiledModelGraph(spec.model, vocab_size);
  const CompiledGraph* graph = compiled ? &*compiled : nullptr;
  const std::vector<int64_t> sizes = ParameterSizes(spec, vocab_size, graph);
  for (int64_t n : sizes) m.parameters = SatAdd(m.parameters, n);
  m.weights_bytes = SatAdd(SatMul(m.parameters, 4), BufferBytes(spec));
  SetGradientsAndOptimizer(spec, sizes, m.parameters, &m);
  const Precision p = PrecisionOf(spec);
  const double batch = static_cast<double>(spec.batch_size);
  const double eval_batch =
      static_cast<double>(spec.eval.batch_size > 0 ? spec.eval.batch_size : spec.batch_size);
  m.activations_bytes = Clamp(std::max(TrainActivations(spec, p, batch, vocab_size, graph),
                                       EvalPeak(spec, p, eval_batch, vocab_size, graph)));
  m.optimizer = OptimizerName(spec.optimizer);
  m.batch = BatchName(spec);
  return m;
}

}  // namespace trainyard::spec
