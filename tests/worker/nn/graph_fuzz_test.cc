// 1,000 seeded random model graphs, from plausible to broken (unknown ops, dangling and cyclic
// inputs, options out of range or foreign to the op, mismatched shapes): each is refused with
// InvalidArgument, or it reads, and then the model it builds runs a batch to the shape the
// compiler inferred. No crash, whatever the graph: every check the kernels would TY_CHECK is
// made before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "worker/autograd/grad_mode.h"
#include "worker/nn/graph.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

constexpr int kGraphs = 1000;

class GraphMaker {
 public:
  explicit GraphMaker(uint64_t seed) : rng_(seed) {}

  Json Make() {
    names_ = {"x"};
    ids_ = Chance(0.3);
    Json::Items nodes;
    const int count = Int(1, 6);
    for (int i = 0; i < count; ++i) nodes.push_back(Node("n" + std::to_string(i), count));
    Json::Items blocks;
    if (Chance(0.3)) {
      std::vector<std::string> outer = names_;
      names_ = {"x"};
      Json::Items inner;
      for (int i = 0; i < Int(1, 3); ++i) inner.push_back(Node("b" + std::to_string(i), 3));
      blocks.push_back(Json::Object({{"name", Json("blk")}, {"nodes", Json::Array(inner)}}));
      names_ = outer;
      nodes.push_back(Json::Object({{"name", Json("rep")},
                                    {"op", Json("block")},
                                    {"block", Json(Chance(0.9) ? "blk" : "other")},
                                    {"repeat", Json(static_cast<int64_t>(Int(0, 3)))},
                                    {"inputs", Json::Array({Json(Pick(names_))})}}));
    }
    std::vector<int64_t> shape;
    for (int i = 0, rank = ids_ ? 1 : Int(1, 3); i < rank; ++i) shape.push_back(Int(1, 6));
    Json input = Json::Object({{"name", Json("x")},
                               {"dtype", Json(ids_ ? "int64" : "float32")},
                               {"shape", Json::Array(Json::Items(shape.begin(), shape.end()))}});
    Json graph = Json::Object({{"input", input}, {"nodes", Json::Array(nodes)}});
    if (!blocks.empty()) graph.Set("blocks", Json::Array(blocks));
    return graph;
  }

 private:
  Json Node(const std::string& name, int count) {
    static const std::vector<std::string> ops = {"linear",
                                                 "embedding",
                                                 "position_embedding",
                                                 "layer_norm",
                                                 "rms_norm",
                                                 "batch_norm",
                                                 "dropout",
                                                 "relu",
                                                 "gelu",
                                                 "tanh",
                                                 "sigmoid",
                                                 "silu",
                                                 "add",
                                                 "mul",
                                                 "concat",
                                                 "reshape",
                                                 "flatten",
                                                 "transpose",
                                                 "softmax",
                                                 "attention",
                                                 "rotary",
                                                 "conv2d",
                                                 "max_pool2d",
                                                 "avg_pool2d",
                                                 "adaptive_avg_pool2d"};
    // Token ids mostly go to an embedding first; now and then an op that does not exist.
    const bool first = names_.size() == 1;
    const std::string op = Chance(0.02)                   ? "nope"
                           : ids_ && first && Chance(0.8) ? "embedding"
                                                          : Pick(ops);
    Json n = Json::Object({{"name", Json(name)}, {"op", Json(op)}});
    Json::Items inputs;
    const int arity = op == "add" || op == "mul" || op == "concat" ? 2
                      : op == "attention" && Chance(0.5)           ? 3
                                                                   : 1;
    for (int i = 0; i < arity; ++i) {
      // Mostly the last node or an earlier one; sometimes a later one (maybe a cycle) or none.
      inputs.push_back(Json(Chance(0.95)  ? (Chance(0.6) ? names_.back() : Pick(names_))
                            : Chance(0.5) ? "n" + std::to_string(Int(0, count))
                                          : std::string("ghost")));
    }
    n.Set("inputs", Json::Array(inputs));
    // Each option mostly where the op takes it, rarely where it does not.
    constexpr double kStray = 0.005;
    auto maybe = [&](const char* key, int lo, int hi, bool takes, double p = 0.95) {
      if (Chance(takes ? p : kStray)) n.Set(key, Json(static_cast<int64_t>(Int(lo, hi))));
    };
    const bool embedding = op == "embedding" || op == "position_embedding";
    maybe("out_features", 0, 8, op == "linear");
    maybe("num_embeddings", 0, 9, embedding);
    maybe("embedding_dim", 0, 6, embedding);
    maybe("out_channels", 0, 4, op == "conv2d");
    maybe("kernel_size", 0, 4, op.find("pool2d") != std::string::npos || op == "conv2d", 0.9);
    maybe("stride", 0, 3, op == "conv2d" || op == "max_pool2d" || op == "avg_pool2d", 0.2);
    maybe("padding", 0, 2, op == "conv2d" || op == "max_pool2d" || op == "avg_pool2d", 0.2);
    maybe("heads", 0, 4, op == "attention" || op == "rotary");
    maybe("kv_heads", 0, 2, op == "attention", 0.3);
    maybe("dim", -4, 4, op == "softmax" || op == "concat", 0.6);
    if (Chance(op == "attention" ? 0.5 : kStray)) n.Set("causal", Json(true));
    if (Chance(0.05)) n.Set("bias", Json(false));
    if (Chance(op == "dropout" ? 0.8 : kStray)) n.Set("p", Json(Chance(0.9) ? 0.5 : 1.5));
    if (Chance(op == "reshape" ? 0.9 : kStray)) {
      n.Set("shape", Json::Array({Json(static_cast<int64_t>(Int(-1, 4))),
                                  Json(static_cast<int64_t>(Int(-1, 4)))}));
    }
    if (Chance(op == "transpose" ? 0.9 : kStray)) {
      n.Set("dims", Json::Array({Json(static_cast<int64_t>(Int(-3, 3))),
                                 Json(static_cast<int64_t>(Int(-3, 3)))}));
    }
    if (op == "gelu" && Chance(0.3)) n.Set("approximate", Json("tanh"));
    if (op == "linear" && Chance(0.1)) n.Set("share", Json(Pick(names_)));
    names_.push_back(name);
    return n;
  }

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  T Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }

  std::mt19937_64 rng_;
  std::vector<std::string> names_;
  bool ids_ = false;  // the input is token ids
};

// A batch of 2 for the graph's input: token ids every embedding takes, or normal floats.
Tensor InputFor(const spec::CompiledGraph& g) {
  std::vector<int64_t> full = {2};
  full.insert(full.end(), g.input.dims.begin(), g.input.dims.end());
  if (!g.input.int64) return Randn(Shape(full));
  int64_t vocab = 1'000'000;
  for (const spec::GraphOp& op : g.ops)
    if (op.node.op == "embedding") vocab = std::min(vocab, op.node.num_embeddings);
  std::vector<int64_t> ids(static_cast<size_t>(Shape(full).numel()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) % vocab;
  return FromVector<int64_t>(ids, Shape(full));
}

TEST(GraphFuzzTest, RandomGraphsAreRefusedOrBuildAndRunToTheirInferredShapes) {
  GraphMaker maker(0x6a09e667f3bcc908);
  int valid = 0;
  for (int i = 0; i < kGraphs; ++i) {
    const Json json = maker.Make();
    SCOPED_TRACE(json.Dump());
    StatusOr<spec::GraphSpec> graph = spec::ParseGraphSpec(json);
    if (!graph.ok()) {
      ASSERT_EQ(graph.status().code(), StatusCode::kInvalidArgument) << graph.status();
      continue;
    }
    ++valid;
    StatusOr<spec::CompiledGraph> compiled = spec::CompileGraph(*graph);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    GraphModel model(*compiled, nullptr);
    const Tensor x = InputFor(*compiled);
    ASSERT_TRUE(model.CheckInput(x).ok()) << model.CheckInput(x);
    autograd::NoGradGuard no_grad;
    const Tensor y = model.Forward(x);
    const spec::ValueShape& want = compiled->shape_of(compiled->output);
    std::vector<int64_t> full = {2};
    full.insert(full.end(), want.dims.begin(), want.dims.end());
    ASSERT_EQ(y.shape(), Shape(full)) << want.ToString();
  }
  // Enough of them read to exercise the builder, and enough are refused.
  EXPECT_GE(valid, 100);
  EXPECT_LE(valid, kGraphs - 100);
  std::cout << valid << " of " << kGraphs << " random graphs read and ran\n";
}

}  // namespace
}  // namespace trainyard::nn
