#include "common/spec/model_graph.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/spec/job_spec_internal.h"

namespace trainyard::spec {

namespace {

using internal::Problem;
using internal::Problems;

constexpr int64_t kMaxRank = 7;  // one sample's dims; a tensor holds 8 with the batch
constexpr size_t kMaxProblems = 100;
constexpr double kMaxParameters = 1099511627776.0;  // 2^40, in one op and in all
constexpr size_t kMaxOps = 100'000;
constexpr double kMaxNumel = 1099511627776.0;  // 2^40 elements in one sample's value

// An op of the catalogue: how many inputs it reads and the options it takes.
struct OpInfo {
  const char* name;
  int min_inputs, max_inputs;
  std::vector<const char*> options;
};

const std::vector<OpInfo>& Catalogue() {
  static const std::vector<OpInfo> ops = {
      {"linear", 1, 1, {"out_features", "bias", "share", "init_std"}},
      {"embedding", 1, 1, {"num_embeddings", "embedding_dim", "init_std"}},
      {"position_embedding", 1, 1, {"num_embeddings", "embedding_dim", "init_std"}},
      {"layer_norm", 1, 1, {"eps", "bias"}},
      {"rms_norm", 1, 1, {"eps"}},
      {"batch_norm", 1, 1, {"eps"}},
      {"dropout", 1, 1, {"p"}},
      {"relu", 1, 1, {}},
      {"gelu", 1, 1, {"approximate"}},
      {"tanh", 1, 1, {}},
      {"sigmoid", 1, 1, {}},
      {"silu", 1, 1, {}},
      {"add", 2, 2, {}},
      {"mul", 2, 2, {}},
      {"concat", 2, 64, {"dim"}},
      {"reshape", 1, 1, {"shape"}},
      {"flatten", 1, 1, {}},
      {"transpose", 1, 1, {"dims"}},
      {"softmax", 1, 1, {"dim"}},
      {"attention", 1, 3, {"heads", "kv_heads", "causal"}},
      {"rotary", 1, 1, {"heads", "theta"}},
      {"conv2d", 1, 1, {"out_channels", "kernel_size", "stride", "padding", "bias", "init_std"}},
      {"max_pool2d", 1, 1, {"kernel_size", "stride", "padding"}},
      {"avg_pool2d", 1, 1, {"kernel_size", "stride", "padding"}},
      {"adaptive_avg_pool2d", 1, 1, {}},
      {"block", 1, 1, {"block", "repeat"}},
  };
  return ops;
}

const OpInfo* FindOp(const std::string& name) {
  for (const OpInfo& op : Catalogue())
    if (name == op.name) return &op;
  return nullptr;
}

// The options of `n` that differ from their defaults.
std::vector<std::string> SetOptions(const GraphNodeSpec& n) {
  const GraphNodeSpec d;
  std::vector<std::pair<const char*, bool>> all = {
      {"block", n.block != d.block},
      {"repeat", n.repeat != d.repeat},
      {"out_features", n.out_features != d.out_features},
      {"num_embeddings", n.num_embeddings != d.num_embeddings},
      {"embedding_dim", n.embedding_dim != d.embedding_dim},
      {"out_channels", n.out_channels != d.out_channels},
      {"kernel_size", n.kernel_size != d.kernel_size},
      {"stride", n.stride != d.stride},
      {"padding", n.padding != d.padding},
      {"heads", n.heads != d.heads},
      {"kv_heads", n.kv_heads != d.kv_heads},
      {"causal", n.causal != d.causal},
      {"bias", n.bias != d.bias},
      {"eps", n.eps != d.eps},
      {"p", n.p != d.p},
      {"dim", n.dim != d.dim},
      {"shape", n.shape != d.shape},
      {"dims", n.dims != d.dims},
      {"share", n.share != d.share},
      {"init_std", n.init_std != d.init_std},
      {"theta", n.theta != d.theta},
      {"approximate", n.approximate != d.approximate},
  };
  std::vector<std::string> out;
  for (const auto& [name, set] : all)
    if (set) out.push_back(name);
  return out;
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// Dotted words of letters, digits and underscores: "transformer.h", "fc1".
bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name.front() == '.' || name.back() == '.') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool word = std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    if (!word && !(c == '.' && name[i + 1] != '.')) return false;
  }
  return true;
}

// One sample's dims as a double product (no overflow).
double Elements(const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(d);
  return n;
}

// An input as messages name it: "ln_1 (B, 64, 256)".
struct Arg {
  std::string name;
  const ValueShape* shape;
  std::string Text() const { return name + " " + shape->ToString(); }
};

#define RETURN_PROBLEM(expr)                \
  do {                                      \
    std::string problem_ = (expr);          \
    if (!problem_.empty()) return problem_; \
  } while (0)

// Shape inference for one op. Returns "" and fills op.shape (and parameters, flops), or the
// problem. `shared` is the op a `share` names (or null).
class OpShaper {
 public:
  OpShaper(GraphOp& op, const std::vector<Arg>& in, const GraphOp* shared)
      : op_(op), n_(op.node), in_(in), shared_(shared) {}

  std::string Run() {
    const std::string& o = n_.op;
    for (const Arg& a : in_) {
      const bool takes_ids = o == "embedding" || o == "position_embedding" || o == "reshape" ||
                             o == "flatten" || o == "transpose";
      if (a.shape->int64 && !takes_ids) {
        return o + " reads " + a.Text() + " int64 token ids; it needs floating point values " +
               "(an embedding turns ids into vectors)";
      }
      if (!a.shape->int64 && (o == "embedding" || o == "position_embedding")) {
        return o + " reads " + a.Text() + " float32; it needs int64 token ids";
      }
    }
    if (o == "linear") return Linear();
    if (o == "embedding" || o == "position_embedding") return Embedding();
    if (o == "layer_norm" || o == "rms_norm") return Norm();
    if (o == "batch_norm") return BatchNorm();
    if (o == "add" || o == "mul") return Broadcast();
    if (o == "concat") return Concat();
    if (o == "reshape") return Reshape();
    if (o == "flatten") return Flatten();
    if (o == "transpose") return Transpose();
    if (o == "softmax") return Softmax();
    if (o == "attention") return Attention();
    if (o == "rotary") return Rotary();
    if (o == "conv2d" || o == "max_pool2d" || o == "avg_pool2d") return Window();
    if (o == "adaptive_avg_pool2d") {
      RETURN_PROBLEM(Needs(3, "(B, C, H, W) images"));
      out() = {{x().shape->dims[0], 1, 1}, true};
      return "";
    }
    out() = *x().shape;  // dropout and the activations keep the shape
    return "";
  }

 private:
  const Arg& x() const { return in_[0]; }
  ValueShape& out() { return op_.shape; }

  // The first input must be batched with `rank` per-sample dims (any when -1, at least 1 when 0).
  std::string Needs(int64_t rank, const std::string& what) const {
    const ValueShape& s = *x().shape;
    const int64_t r = static_cast<int64_t>(s.dims.size());
    if (!s.batched || (rank > 0 && r != rank) || (rank == 0 && r == 0)) {
      return n_.op + " reads " + x().Text() + "; it needs " + what;
    }
    return "";
  }
  // A dim counting the batch as 0, as a per-sample index; -1 with *problem set when invalid.
  int64_t SampleDim(int64_t dim, const ValueShape& s, std::string* problem) const {
    const int64_t r = s.rank();
    const int64_t d = dim < 0 ? dim + r : dim;
    if (d < 0 || d >= r || (s.batched && d == 0)) {
      *problem = n_.op + ": dim " + std::to_string(dim) + " is not a dimension of " + x().Text() +
                 (s.batched ? " other than the batch (B)" : "");
      return -1;
    }
    return d - (s.batched ? 1 : 0);
  }

  std::string Linear() {
    RETURN_PROBLEM(Needs(0, "(B, ..., features)"));
    const int64_t in = x().shape->dims.back();
    int64_t outf = n_.out_features;
    if (shared_ != nullptr) {
      const GraphNodeSpec& s = shared_->node;
      if (shared_->weight.size() != 2 || !s.share.empty()) {
        return "linear: share names " + s.name + ", a " + s.op +
               "; it must be an embedding or a linear that owns its weight";
      }
      if (outf == 0) outf = shared_->weight[0];
      if (shared_->weight != std::vector<int64_t>{outf, in}) {
        return "linear: shares the (" + std::to_string(shared_->weight[0]) + ", " +
               std::to_string(shared_->weight[1]) + ") weight of " + s.name + " but needs (" +
               std::to_string(outf) + ", " + std::to_string(in) + ") to map " + x().Text() +
               " to " + std::to_string(outf) + " features";
      }
    } else if (outf < 1) {
      return "linear: out_features is required (at least 1)";
    }
    out() = *x().shape;
    out().dims.back() = outf;
    op_.weight = {outf, in};
    op_.parameters = Count(static_cast<double>(shared_ ? 0 : in) * static_cast<double>(outf) +
                           (n_.bias ? static_cast<double>(outf) : 0));
    op_.flops = 2.0 * static_cast<double>(in) * static_cast<double>(outf) *
                Elements(x().shape->dims) / static_cast<double>(in);
    return "";
  }

  std::string Embedding() {
    if (n_.num_embeddings < 1 || n_.embedding_dim < 1) {
      return n_.op + ": num_embeddings and embedding_dim are required (at least 1)";
    }
    const ValueShape& s = *x().shape;
    if (n_.op == "position_embedding") {
      RETURN_PROBLEM(Needs(1, "(B, T) token ids"));
      if (s.dims[0] > n_.num_embeddings) {
        return "position_embedding: " + x().Text() + " has " + std::to_string(s.dims[0]) +
               " positions, more than num_embeddings = " + std::to_string(n_.num_embeddings);
      }
      out() = {{s.dims[0], n_.embedding_dim}, /*batched=*/false};
    } else {
      out() = s;
      out().int64 = false;
      out().dims.push_back(n_.embedding_dim);
    }
    op_.parameters =
        Count(static_cast<double>(n_.num_embeddings) * static_cast<double>(n_.embedding_dim));
    op_.weight = {n_.num_embeddings, n_.embedding_dim};
    return "";
  }

  std::string Norm() {
    RETURN_PROBLEM(Needs(0, "(B, ..., features)"));
    out() = *x().shape;
    const int64_t c = x().shape->dims.back();
    op_.parameters = n_.op == "layer_norm" && n_.bias ? 2 * c : c;
    return "";
  }

  std::string BatchNorm() {
    RETURN_PROBLEM(Needs(3, "(B, C, H, W) images"));
    out() = *x().shape;
    op_.parameters = 2 * x().shape->dims[0];
    return "";
  }

  // add and mul: PyTorch's broadcasting, the batch (B) a dimension that only 1 matches.
  std::string Broadcast() {
    constexpr int64_t kB = -2;
    auto full = [kB](const ValueShape& s) {
      std::vector<int64_t> f;
      if (s.batched) f.push_back(kB);
      f.insert(f.end(), s.dims.begin(), s.dims.end());
      return f;
    };
    std::vector<int64_t> a = full(*in_[0].shape), b = full(*in_[1].shape);
    if (a.size() < b.size()) std::swap(a, b);
    std::vector<int64_t> r = a;
    const size_t off = a.size() - b.size();
    bool ok = true;
    for (size_t i = 0; i < b.size(); ++i) {
      const int64_t p = a[off + i], q = b[i];
      if (p == q || q == 1) continue;
      if (p == 1)
        r[off + i] = q;
      else
        ok = false;
    }
    for (size_t i = 1; i < r.size(); ++i) ok = ok && r[i] != kB;
    if (!ok) {
      return n_.op + ": cannot broadcast " + in_[0].Text() + " with " + in_[1].Text();
    }
    out().batched = !r.empty() && r[0] == kB;
    out().dims.assign(r.begin() + (out().batched ? 1 : 0), r.end());
    return "";
  }

  std::string Concat() {
    std::string problem;
    const int64_t d = SampleDim(n_.dim, *x().shape, &problem);
    if (d < 0) return problem;
    out() = *x().shape;
    out().dims[static_cast<size_t>(d)] = 0;
    for (const Arg& a : in_) {
      const ValueShape& s = *a.shape;
      bool same = s.batched == x().shape->batched && s.dims.size() == x().shape->dims.size();
      for (size_t i = 0; same && i < s.dims.size(); ++i)
        same = i == static_cast<size_t>(d) || s.dims[i] == x().shape->dims[i];
      if (!same) {
        return "concat: " + a.Text() + " does not match " + x().Text() + " outside dim " +
               std::to_string(n_.dim);
      }
      out().dims[static_cast<size_t>(d)] += s.dims[static_cast<size_t>(d)];
    }
    return "";
  }

  std::string Reshape() {
    RETURN_PROBLEM(Needs(-1, "a batched value"));
    const std::vector<int64_t>& want = n_.shape;
    if (want.empty() || static_cast<int64_t>(want.size()) > kMaxRank) {
      return "reshape: shape needs 1 to " + std::to_string(kMaxRank) + " entries";
    }
    const int64_t unknown = std::count(want.begin(), want.end(), -1);
    const bool zero = std::count(want.begin(), want.end(), 0) > 0;
    double known = 1;
    for (int64_t v : want)
      if (v > 0) known *= static_cast<double>(v);
    const double have = Elements(x().shape->dims);
    std::vector<int64_t> dims = want;
    const bool fits =
        unknown == 0 ? known == have : std::fmod(have, known) == 0 && have / known >= 1;
    if (unknown > 1 || zero || !fits) {
      return "reshape: cannot view " + x().Text() + " as (B, " + Join(ToStrings(want), ", ") + ")" +
             (unknown > 1 ? ": at most one -1"
              : zero      ? ": sizes must be positive"
                          : "");
    }
    for (int64_t& v : dims)
      if (v == -1) v = static_cast<int64_t>(have / known);
    out() = {dims, true, x().shape->int64};
    return "";
  }

  std::string Flatten() {
    RETURN_PROBLEM(Needs(0, "a batched value with dimensions after the batch"));
    out() = {{x().shape->numel()}, true, x().shape->int64};
    return "";
  }

  std::string Transpose() {
    if (n_.dims.size() != 2) return "transpose: dims needs two entries";
    std::string problem;
    const int64_t a = SampleDim(n_.dims[0], *x().shape, &problem);
    const int64_t b = a < 0 ? -1 : SampleDim(n_.dims[1], *x().shape, &problem);
    if (b < 0) return problem;
    out() = *x().shape;
    std::swap(out().dims[static_cast<size_t>(a)], out().dims[static_cast<size_t>(b)]);
    return "";
  }

  std::string Softmax() {
    std::string problem;
    if (SampleDim(n_.dim, *x().shape, &problem) < 0) return problem;
    out() = *x().shape;
    return "";
  }

  std::string Attention() {
    if (in_.size() == 2) return "attention reads 1 input (q, k and v packed) or 3 (q, k, v), not 2";
    for (const Arg& a : in_) {
      if (!a.shape->batched || a.shape->dims.size() != 2) {
        return "attention reads " + a.Text() + "; it needs (B, T, features)";
      }
    }
    const int64_t heads = n_.heads, kv = n_.kv_heads == 0 ? heads : n_.kv_heads;
    if (heads < 1) return "attention: heads is required (at least 1)";
    if (heads % kv != 0) {
      return "attention: kv_heads = " + std::to_string(kv) +
             " must divide heads = " + std::to_string(heads);
    }
    const int64_t t = x().shape->dims[0], width = x().shape->dims[1];
    int64_t c = width, s = t, kv_width = width;
    if (in_.size() == 1) {
      if (kv != heads) {
        return "attention: packed q, k and v need kv_heads = heads; give q, k and v as three "
               "inputs";
      }
      if (width % 3 != 0) return "attention: packed " + x().Text() + " must have 3 x C features";
      c = kv_width = width / 3;
    } else {
      const ValueShape &k = *in_[1].shape, &v = *in_[2].shape;
      s = k.dims[0];
      kv_width = k.dims[1];
      if (k.dims != v.dims) {
        return "attention: keys " + in_[1].Text() + " and values " + in_[2].Text() + " differ";
      }
    }
    if (c % heads != 0) {
      return "attention: heads = " + std::to_string(heads) + " must divide the " +
             std::to_string(c) + " features of " + x().Text();
    }
    if (kv_width != kv * (c / heads)) {
      return "attention: keys " + in_[1].Text() +
             " need kv_heads x head size = " + std::to_string(kv * (c / heads)) +
             " features (queries " + x().Text() + ")";
    }
    if (n_.causal && s != t) {
      return "attention: causal needs as many keys as queries (" + in_[1].Text() + ", " +
             x().Text() + ")";
    }
    out() = {{t, c}, true};
    op_.flops = 4.0 * static_cast<double>(t) * static_cast<double>(s) * static_cast<double>(c);
    return "";
  }

  // Rotary position embeddings over `heads` heads side by side: (B, T, heads x even size).
  std::string Rotary() {
    RETURN_PROBLEM(Needs(2, "(B, T, heads x head size)"));
    const int64_t c = x().shape->dims[1];
    if (n_.heads < 1) return "rotary: heads is required (at least 1)";
    if (c % n_.heads != 0 || (c / n_.heads) % 2 != 0) {
      return "rotary: " + x().Text() + " must hold heads = " + std::to_string(n_.heads) +
             " heads of an even size";
    }
    out() = *x().shape;
    return "";
  }

  // conv2d and the poolings: a square window over (C, H, W).
  std::string Window() {
    RETURN_PROBLEM(Needs(3, "(B, C, H, W) images"));
    const int64_t k = n_.kernel_size;
    const bool conv = n_.op == "conv2d";
    if (k < 1) return n_.op + ": kernel_size is required (at least 1)";
    if (conv && n_.out_channels < 1) return "conv2d: out_channels is required (at least 1)";
    const int64_t stride = n_.stride > 0 ? n_.stride : conv ? 1 : k;
    if (!conv && 2 * n_.padding > k) {
      return n_.op + ": padding = " + std::to_string(n_.padding) +
             " must be at most half of kernel_size = " + std::to_string(k);
    }
    const std::vector<int64_t>& d = x().shape->dims;
    const int64_t h = (d[1] + 2 * n_.padding - k) / stride + 1;
    const int64_t w = (d[2] + 2 * n_.padding - k) / stride + 1;
    if (d[1] + 2 * n_.padding < k || d[2] + 2 * n_.padding < k) {
      return n_.op + ": kernel_size = " + std::to_string(k) + " is larger than " + x().Text() +
             " with padding " + std::to_string(n_.padding);
    }
    const int64_t channels = conv ? n_.out_channels : d[0];
    out() = {{channels, h, w}, true};
    if (conv) {
      const double weights = static_cast<double>(n_.out_channels) * static_cast<double>(d[0]) *
                             static_cast<double>(k * k);
      op_.parameters = Count(weights + (n_.bias ? static_cast<double>(n_.out_channels) : 0));
      op_.flops = 2.0 * weights * static_cast<double>(h) * static_cast<double>(w);
    }
    return "";
  }

  // A parameter count, or -1 beyond 2^40 (the compiler refuses it).
  static int64_t Count(double n) { return n > kMaxParameters ? -1 : static_cast<int64_t>(n); }

  static std::vector<std::string> ToStrings(const std::vector<int64_t>& v) {
    std::vector<std::string> out;
    for (int64_t x : v) out.push_back(std::to_string(x));
    return out;
  }
#undef RETURN_PROBLEM

  GraphOp& op_;
  const GraphNodeSpec& n_;
  const std::vector<Arg>& in_;
  const GraphOp* shared_;
};

// Compiles a GraphSpec scope by scope (the graph's nodes, then each block node's block, once
// per repeat), appending ops in run order and a problem for everything wrong.
class Compiler {
 public:
  Compiler(const GraphSpec& g, Problems* problems) : g_(g), problems_(problems) {}

  void Run(CompiledGraph* out) {
    out_ = out;
    const size_t before = problems_->size();
    const GraphInputSpec& in = g_.input;
    if (!ValidName(in.name)) Add("model.graph.input.name", "", NameRule(in.name));
    if (in.shape.empty() || static_cast<int64_t>(in.shape.size()) > kMaxRank) {
      Add("model.graph.input.shape", "",
          "one sample's shape needs 1 to " + std::to_string(kMaxRank) + " entries");
    } else if (Elements(in.shape) > kMaxNumel) {
      Add("model.graph.input.shape", "", "one sample is larger than 2^40 elements");
    }
    for (size_t b = 0; b < g_.blocks.size(); ++b) {
      const std::string where = "model.graph.blocks[" + std::to_string(b) + "]";
      const std::string& name = g_.blocks[b].name;
      if (!ValidName(name)) Add(where + ".name", "", NameRule(name));
      for (size_t c = 0; c < b; ++c)
        if (g_.blocks[c].name == name)
          Add(where + ".name", "", "block " + name + " is defined twice");
      if (g_.blocks[b].nodes.empty()) Add(where + ".nodes", "", "a block needs at least one node");
    }
    if (g_.nodes.empty()) Add("model.graph.nodes", "", "a graph needs at least one node");
    size_t nodes = g_.nodes.size();
    for (const GraphBlockSpec& b : g_.blocks) nodes += b.nodes.size();
    if (nodes > kMaxOps) {
      Add("model.graph", "", std::to_string(nodes) + " nodes; at most " + std::to_string(kMaxOps));
    }
    if (problems_->size() != before) return;
    out->input = {in.shape, true, in.dtype == "int64"};
    std::map<std::string, int> outer = {{in.name, 0}};
    const std::optional<int> result = Scope(g_.nodes, "model.graph", "", outer, g_.output, -1, {});
    CheckBlocksUsed();
    if (!result) return;
    out->output = *result;
    const ValueShape& shape = out->shape_of(*result);
    if (!shape.batched || shape.int64 || shape.dims.empty()) {
      Add(g_.output.empty() ? "model.graph.nodes" : "model.graph.output", "",
          "the model's output " + shape.ToString() + (shape.int64 ? " int64" : "") +
              " must be batched floating point values with dimensions after the batch");
    }
    CheckModules();
    double parameters = 0;
    for (const GraphOp& op : out->ops) {
      parameters += static_cast<double>(op.parameters);
      out->flops_per_sample += op.flops;
    }
    if (parameters > kMaxParameters) {
      Add("model.graph", "", "the graph holds more than 2^40 parameters");
    } else {
      out->parameters = static_cast<int64_t>(parameters);
    }
  }

 private:
  static std::string NameRule(const std::string& name) {
    return "name " + internal::Quote(name) +
           " must be dotted words of letters, digits and underscores (as fc1 or transformer.wte)";
  }

  // Records a problem once; after kMaxProblems of the graph's, the rest go unsaid.
  void Add(const std::string& where, const std::string& node, const std::string& what) {
    const std::string line = where + (node.empty() ? "" : " (" + node + ")") + ": " + what;
    if (lines_.size() >= kMaxProblems || !lines_.insert(line).second) return;
    problems_->push_back({where, what, line});
  }

  // The nodes of one scope in run order (each after its inputs and the node it shares), or
  // nothing after recording the problems: bad names, unknown ops or options, dangling inputs,
  // cycles.
  std::optional<std::vector<size_t>> Order(const std::vector<GraphNodeSpec>& nodes,
                                           const std::string& where, bool in_block,
                                           const std::map<std::string, int>& outer) {
    const size_t before = problems_->size();
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const GraphNodeSpec& n = nodes[i];
      const std::string at = where + ".nodes[" + std::to_string(i) + "]";
      if (!ValidName(n.name)) {
        Add(at + ".name", "", NameRule(n.name));
      } else if (index.count(n.name) || outer.count(n.name)) {
        Add(at + ".name", n.name, "the name " + n.name + " is taken");
      } else {
        index[n.name] = i;
      }
      CheckOp(n, at, in_block);
    }
    // deps[i]: the nodes node i reads or shares, by index.
    std::vector<std::vector<size_t>> deps(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string at = where + ".nodes[" + std::to_string(i) + "]";
      std::vector<std::string> reads = nodes[i].inputs;
      if (!nodes[i].share.empty()) reads.push_back(nodes[i].share);
      for (const std::string& r : reads) {
        auto it = index.find(r);
        if (it != index.end()) {
          deps[i].push_back(it->second);
        } else if (r == nodes[i].share) {
          Add(at + ".share", nodes[i].name,
              "shares the weight of " + internal::Quote(r) + ", which is no node of this " +
                  (in_block ? "block" : "graph") + " (an input has no weight)");
        } else if (!outer.count(r)) {
          Add(at, nodes[i].name,
              "reads " + internal::Quote(r) + ", which is no node of this " +
                  (in_block ? "block" : "graph") + " (nor its input " + outer.begin()->first + ")");
        }
      }
    }
    if (problems_->size() != before) return std::nullopt;
    // Depth-first, in the nodes' order, without recursion (a chain may be 100,000 long):
    // 0 unvisited, 1 on the path, 2 done. path holds (node, next dependency to visit).
    std::vector<int> state(nodes.size(), 0);
    std::vector<size_t> order;
    std::vector<std::pair<size_t, size_t>> path;
    for (size_t root = 0; root < nodes.size(); ++root) {
      if (state[root] != 0) continue;
      state[root] = 1;
      path.push_back({root, 0});
      while (!path.empty()) {
        auto& [i, next] = path.back();
        if (next == deps[i].size()) {
          state[i] = 2;
          order.push_back(i);
          path.pop_back();
          continue;
        }
        const size_t d = deps[i][next++];
        if (state[d] == 2) continue;
        if (state[d] == 1) {
          std::vector<std::string> cycle;
          auto from = std::find_if(path.begin(), path.end(), [&](auto& e) { return e.first == d; });
          for (auto it = from; it != path.end(); ++it) cycle.push_back(nodes[it->first].name);
          cycle.push_back(nodes[d].name);
          Add(where + ".nodes", "", "the graph has a cycle: " + Join(cycle, " -> "));
          return std::nullopt;
        }
        state[d] = 1;
        path.push_back({d, 0});
      }
    }
    return order;
  }

  void CheckOp(const GraphNodeSpec& n, const std::string& at, bool in_block) {
    const OpInfo* op = FindOp(n.op);
    if (op == nullptr) {
      Add(at + ".op", n.name,
          "unknown op " + internal::Quote(n.op) + "; the ops are " + Join(GraphOps(), ", "));
      return;
    }
    for (const std::string& option : SetOptions(n)) {
      if (std::none_of(op->options.begin(), op->options.end(),
                       [&](const char* o) { return option == o; })) {
        std::vector<std::string> takes(op->options.begin(), op->options.end());
        Add(at + "." + option, n.name,
            n.op + " takes no " + option + " (it takes " +
                (takes.empty() ? std::string("no options") : Join(takes, ", ")) + ")");
      }
    }
    const int count = static_cast<int>(n.inputs.size());
    if (count < op->min_inputs || count > op->max_inputs) {
      const std::string want =
          op->min_inputs == op->max_inputs
              ? std::to_string(op->min_inputs)
              : std::to_string(op->min_inputs) + " to " + std::to_string(op->max_inputs);
      Add(at + ".inputs", n.name,
          n.op + " reads " + want + " input" + (op->max_inputs == 1 ? "" : "s") + ", not " +
              std::to_string(count));
    }
    if (n.op == "block" && in_block) Add(at + ".op", n.name, "a block cannot hold block nodes");
    if (n.op == "block" && !in_block && FindBlock(n.block) < 0) {
      std::vector<std::string> names;
      for (const GraphBlockSpec& b : g_.blocks) names.push_back(b.name);
      Add(at + ".block", n.name,
          "no block is named " + internal::Quote(n.block) +
              " (blocks: " + (names.empty() ? std::string("none") : Join(names, ", ")) + ")");
    }
  }

  // A block no node runs would go unchecked: it is refused instead.
  void CheckBlocksUsed() {
    for (size_t b = 0; b < g_.blocks.size(); ++b) {
      const bool used = std::any_of(g_.nodes.begin(), g_.nodes.end(), [&](const GraphNodeSpec& n) {
        return n.op == "block" && n.block == g_.blocks[b].name;
      });
      if (!used) {
        Add("model.graph.blocks[" + std::to_string(b) + "]", "",
            "block " + g_.blocks[b].name + " is run by no node");
      }
    }
  }

  int FindBlock(const std::string& name) const {
    for (size_t b = 0; b < g_.blocks.size(); ++b)
      if (g_.blocks[b].name == name) return static_cast<int>(b);
    return -1;
  }

  // Compiles one scope's nodes with module prefix `prefix`; `outer` names the values they may
  // read besides each other. Returns the value of the scope's output node.
  std::optional<int> Scope(const std::vector<GraphNodeSpec>& nodes, const std::string& where,
                           const std::string& prefix, const std::map<std::string, int>& outer,
                           const std::string& output, int block, const std::vector<int64_t>& key) {
    std::optional<std::vector<size_t>> order = Order(nodes, where, block >= 0, outer);
    if (!order) return std::nullopt;
    std::map<std::string, int> values = outer;
    for (size_t i : *order) {
      const GraphNodeSpec& n = nodes[i];
      const std::string at = where + ".nodes[" + std::to_string(i) + "]";
      std::vector<int64_t> k = key;
      k.push_back(static_cast<int64_t>(i));
      std::optional<int> value = n.op == "block" ? Repeat(n, at, prefix, values.at(n.inputs[0]), k)
                                                 : Op(n, at, prefix, values, block, k);
      if (!value) return std::nullopt;
      values[n.name] = *value;
    }
    const std::string& last = output.empty() ? nodes.back().name : output;
    if (!values.count(last) || outer.count(last)) {
      Add(where + ".output", "",
          outer.count(last) ? "the output must be a node, not the input " + internal::Quote(last)
                            : "no node is named " + internal::Quote(output));
      return std::nullopt;
    }
    return values.at(last);
  }

  std::optional<int> Op(const GraphNodeSpec& n, const std::string& at, const std::string& prefix,
                        const std::map<std::string, int>& values, int block,
                        const std::vector<int64_t>& key) {
    if (out_->ops.size() >= kMaxOps) {
      Add(at, n.name, "the graph expands to more than " + std::to_string(kMaxOps) + " ops");
      return std::nullopt;
    }
    GraphOp op;
    op.node = n;
    op.where = at;
    op.key = key;
    std::vector<Arg> args;
    for (const std::string& r : n.inputs) {
      op.inputs.push_back(values.at(r));
      args.push_back({r, &out_->shape_of(op.inputs.back())});
    }
    const GraphOp* shared = nullptr;
    if (!n.share.empty()) {
      op.shared = values.at(n.share) - 1;
      shared = &out_->ops[static_cast<size_t>(op.shared)];
    }
    const std::string problem = OpShaper(op, args, shared).Run();
    const std::string context =
        block >= 0 && !prefix.empty() ? " (in " + prefix.substr(0, prefix.size() - 1) + ")" : "";
    if (!problem.empty()) {
      Add(at, n.name, problem + context);
      return std::nullopt;
    }
    if (Elements(op.shape.dims) > kMaxNumel || op.shape.rank() > kMaxRank + 1) {
      Add(at, n.name,
          "its output " + op.shape.ToString() + " is larger than 2^40 elements or 8 dimensions");
      return std::nullopt;
    }
    if (op.parameters < 0) {
      Add(at, n.name, "it would hold more than 2^40 parameters");
      return std::nullopt;
    }
    if (op.parameters > 0 || op.shared >= 0) op.module = prefix + n.name;
    out_->ops.push_back(std::move(op));
    return static_cast<int>(out_->ops.size());
  }

  // A block node: its block `repeat` times, each run reading the last one's output.
  std::optional<int> Repeat(const GraphNodeSpec& n, const std::string& at,
                            const std::string& prefix, int input, const std::vector<int64_t>& key) {
    const int b = FindBlock(n.block);
    const GraphBlockSpec& block = g_.blocks[static_cast<size_t>(b)];
    const std::string where = "model.graph.blocks[" + std::to_string(b) + "]";
    if (!ValidName(block.input)) {
      Add(where + ".input", "", NameRule(block.input));
      return std::nullopt;
    }
    int value = input;
    for (int64_t r = 0; r < n.repeat; ++r) {
      const std::string inner =
          prefix + n.name + (n.repeat > 1 ? "." + std::to_string(r) : "") + ".";
      const ValueShape in = out_->shape_of(value);
      std::vector<int64_t> k = key;
      k.push_back(r);
      std::optional<int> next =
          Scope(block.nodes, where, inner, {{block.input, value}}, block.output, b, k);
      if (!next) return std::nullopt;
      value = *next;
      const ValueShape& got = out_->shape_of(value);
      if (n.repeat > 1 && (got.dims != in.dims || got.batched != in.batched)) {
        Add(at, n.name,
            "repeat = " + std::to_string(n.repeat) + " needs block " + block.name +
                " to keep its input's shape, but it maps " + in.ToString() + " to " +
                got.ToString());
        return std::nullopt;
      }
    }
    return value;
  }

  // No two ops may hold parameters under one path, nor one inside another's ("fc" and "fc.x"
  // both with weights).
  void CheckModules() {
    std::map<std::string, const GraphOp*> modules;
    for (const GraphOp& op : out_->ops) {
      if (op.module.empty()) continue;
      auto [it, added] = modules.emplace(op.module, &op);
      if (!added) {
        Add(op.where, op.node.name,
            "its parameters' names (" + op.module + ".*) are taken by " + it->second->where);
      }
    }
    std::string last;
    const GraphOp* last_op = nullptr;
    for (const auto& [path, op] : modules) {
      if (last_op != nullptr && path.compare(0, last.size() + 1, last + ".") == 0) {
        Add(op->where, op->node.name,
            "its parameters (" + path + ".*) would sit inside those of " + last_op->where + " (" +
                last + ".*); rename one");
      }
      last = path;
      last_op = op;
    }
  }

  const GraphSpec& g_;
  Problems* problems_;
  CompiledGraph* out_ = nullptr;
  std::set<std::string> lines_;  // the problems recorded
};

}  // namespace

int64_t ValueShape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string ValueShape::ToString() const {
  std::string s = "(";
  if (batched) s += dims.empty() ? "B" : "B, ";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

namespace internal {

void CheckGraph(const GraphSpec& graph, Problems* problems, CompiledGraph* out) {
  Compiler(graph, problems).Run(out);
}

}  // namespace internal

StatusOr<CompiledGraph> CompileGraph(const GraphSpec& graph) {
  Problems problems;
  CompiledGraph out;
  internal::CheckGraph(graph, &problems, &out);
  if (problems.empty()) return out;
  std::vector<std::string> lines;
  for (const Problem& p : problems) lines.push_back(p.line);
  return InvalidArgumentError("model.graph: " + Join(lines, "\n  "));
}

std::optional<GraphSpec> ModelGraph(const ModelSpec& m, int64_t vocab) {
  if (m.arch == "graph") return m.graph;
  if (m.arch == "llama") return LlamaGraph(m.llama, vocab);
  return std::nullopt;
}

std::vector<std::string> GraphOps() {
  std::vector<std::string> out;
  for (const OpInfo& op : Catalogue()) out.push_back(op.name);
  return out;
}

}  // namespace trainyard::spec
