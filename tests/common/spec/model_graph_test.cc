// Model graphs (model.graph, common/spec/model_graph.h): read, checked and shaped before anything
// runs. Malformed graphs are refused with every problem at once, each naming its path, its
// node and, for a shape mismatch, both nodes and both shapes.
#include "common/spec/model_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/common/spec/spec_test_util.h"
#include "tests/testing/graph_specs.h"

namespace trainyard::spec {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::ParseOrDie;

// The problems ParseGraphSpec reports for `graph_json` ("" when it reads).
std::string GraphProblems(const std::string& graph_json) {
  StatusOr<GraphSpec> graph = ParseGraphSpec(ParseOrDie(graph_json));
  if (graph.ok()) return "";
  EXPECT_EQ(graph.status().code(), StatusCode::kInvalidArgument);
  return std::string(graph.status().message());
}

// A float32 (B, 8) input read by `nodes` (JSON list items).
std::string Graph(const std::string& nodes, const std::string& extra = "") {
  return R"({"input": {"name": "x", "shape": [8]}, "nodes": [)" + nodes + "]" + extra + "}";
}

TEST(ModelGraphTest, TheGptGraphHasNanoGptsParameterCountAndFlops) {
  StatusOr<CompiledGraph> g = CompileGraph(trainyard::testing::GraphOf(
      trainyard::testing::GptGraphJson(/*vocab=*/65, /*context=*/64, 4, 4, /*embd=*/128)));
  ASSERT_TRUE(g.ok()) << g.status();
  // Embeddings (65 + 64) x 128, 4 blocks of 12 C^2 + 13 C, ln_f 2 C; lm_head is tied.
  EXPECT_EQ(g->parameters, (65 + 64) * 128 + 4 * (12 * 128 * 128 + 13 * 128) + 2 * 128);
  // Per block 2 T 12 C^2 in its linears and 4 T^2 C in attention; lm_head 2 T C V.
  const double t = 64, c = 128;
  EXPECT_DOUBLE_EQ(g->flops_per_sample, 4 * (2 * t * 12 * c * c + 4 * t * t * c) + 2 * t * c * 65);
  EXPECT_EQ(g->shape_of(g->output).ToString(), "(B, 64, 65)");
  EXPECT_EQ(g->ops.size(), 5u + 4 * 10);  // 10 nodes a block
  EXPECT_EQ(g->ops[3].module, "transformer.h.0.ln_1");
  EXPECT_EQ(g->ops.back().module, "lm_head");
}

TEST(ModelGraphTest, NodesMayComeInAnyOrderAndRunAfterTheirInputs) {
  StatusOr<GraphSpec> graph = ParseGraphSpec(ParseOrDie(Graph(
      R"({"name": "out", "op": "linear", "inputs": ["h"], "out_features": 2},
         {"name": "h", "op": "relu", "inputs": ["x"]})",
      R"(, "output": "out")")));
  ASSERT_TRUE(graph.ok()) << graph.status();
  StatusOr<CompiledGraph> g = CompileGraph(*graph);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ops[0].node.name, "h");
  EXPECT_EQ(g->ops[1].inputs, std::vector<int>{1});
}

TEST(ModelGraphTest, ACycleIsRefusedAndNamed) {
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "a", "op": "add", "inputs": ["x", "b"]},
                                     {"name": "b", "op": "relu", "inputs": ["a"]})")),
              HasSubstr("model.graph.nodes: the graph has a cycle: a -> b -> a"));
}

TEST(ModelGraphTest, UnknownOpsDanglingInputsAndForeignOptionsAreRefused) {
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "c", "op": "convolution", "inputs": ["x"]})")),
              AllOf(HasSubstr("model.graph.nodes[0].op (c): unknown op \"convolution\""),
                    HasSubstr("the ops are linear, embedding")));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "r", "op": "relu", "inputs": ["nope"]})")),
              HasSubstr("model.graph.nodes[0] (r): reads \"nope\", which is no node of this "
                        "graph (nor its input x)"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "r", "op": "relu", "inputs": ["x"], "heads": 2})")),
              HasSubstr("model.graph.nodes[0].heads (r): relu takes no heads (it takes no "
                        "options)"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "r", "op": "add", "inputs": ["x"]})")),
              HasSubstr("add reads 2 inputs, not 1"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "r", "op": "relu", "inputs": ["x"], "kernel": 3})")),
              HasSubstr("unknown field model.graph.nodes[0].kernel"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "a b", "op": "relu", "inputs": ["x"]})")),
              HasSubstr("model.graph.nodes[0].name: name \"a b\" must be dotted words"));
  // Every problem at once.
  const std::string both = GraphProblems(Graph(R"({"name": "a", "op": "nope", "inputs": ["x"]},
                                                  {"name": "b", "op": "relu", "inputs": ["y"]})"));
  EXPECT_THAT(both, AllOf(HasSubstr("nodes[0].op (a)"), HasSubstr("nodes[1] (b)")));
}

TEST(ModelGraphTest, AShapeMismatchNamesBothNodesAndBothShapes) {
  EXPECT_THAT(
      GraphProblems(Graph(R"({"name": "fc1", "op": "linear", "inputs": ["x"], "out_features": 32},
                             {"name": "fc2", "op": "linear", "inputs": ["x"], "out_features": 16},
                             {"name": "sum", "op": "add", "inputs": ["fc1", "fc2"]})")),
      HasSubstr("model.graph.nodes[2] (sum): add: cannot broadcast fc1 (B, 32) with fc2 (B, 16)"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "r", "op": "reshape", "inputs": ["x"],
                                      "shape": [2, 4]},
                                     {"name": "a", "op": "attention", "inputs": ["r"], "heads": 3,
                                      "causal": true})")),
              HasSubstr("attention: packed r (B, 2, 4) must have 3 x C features"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "a", "op": "attention", "inputs": ["x"],
                                      "heads": 2})")),
              HasSubstr("attention reads x (B, 8); it needs (B, T, features)"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "e", "op": "embedding", "inputs": ["x"],
                                      "num_embeddings": 4, "embedding_dim": 2})")),
              HasSubstr("embedding reads x (B, 8) float32; it needs int64 token ids"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "v", "op": "reshape", "inputs": ["x"],
                                      "shape": [3, -1]})")),
              HasSubstr("reshape: cannot view x (B, 8) as (B, 3, -1)"));
}

TEST(ModelGraphTest, RepeatCountsOutOfRangeAndShapeChangingRepeatsAreRefused) {
  const std::string blocks = R"(, "blocks": [{"name": "wide", "nodes": [
      {"name": "fc", "op": "linear", "inputs": ["x"], "out_features": 16}]}])";
  for (const char* repeat : {"0", "1025", "-3"}) {
    EXPECT_THAT(GraphProblems(Graph(std::string(R"({"name": "h", "op": "block", "block": "wide",
                                                   "inputs": ["x"], "repeat": )") +
                                        repeat + "}",
                                    blocks)),
                HasSubstr(std::string("model.graph.nodes[0].repeat = ") + repeat +
                          ": must be in [1, 1024]"));
  }
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "h", "op": "block", "block": "wide",
                                      "inputs": ["x"], "repeat": 3})",
                                  blocks)),
              HasSubstr("repeat = 3 needs block wide to keep its input's shape, but it maps "
                        "(B, 8) to (B, 16)"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "h", "op": "block", "block": "narrow",
                                      "inputs": ["x"]})",
                                  blocks)),
              HasSubstr("no block is named \"narrow\" (blocks: wide)"));
  // Once, it may change the shape; its parameters are not numbered.
  StatusOr<GraphSpec> once = ParseGraphSpec(ParseOrDie(
      Graph(R"({"name": "h", "op": "block", "block": "wide", "inputs": ["x"]})", blocks)));
  ASSERT_TRUE(once.ok()) << once.status();
  EXPECT_EQ(CompileGraph(*once)->ops[0].module, "h.fc");
}

TEST(ModelGraphTest, SharedWeightsAndParameterNamesMustFit) {
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "fc1", "op": "linear", "inputs": ["x"],
                                      "out_features": 4},
                                     {"name": "fc2", "op": "linear", "inputs": ["fc1"],
                                      "share": "fc1"})")),
              HasSubstr("linear: shares the (4, 8) weight of fc1 but needs (4, 4)"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "fc", "op": "linear", "inputs": ["x"],
                                      "out_features": 8},
                                     {"name": "fc.inner", "op": "linear", "inputs": ["fc"],
                                      "out_features": 2})")),
              HasSubstr("its parameters (fc.inner.*) would sit inside those of"));
}

TEST(ModelGraphTest, TheGraphMustFitItsData) {
  Json job = ParseOrDie(R"({"name": "g", "data": {"tokens": {"path": "t.bin"}},
                           "optimizer": {"sgd": {"lr": 0.1}}})");
  job.Set("model", Json::Object({{"graph", ParseOrDie(trainyard::testing::MlpGraphJson({8, 4}))}}));
  StatusOr<JobSpec> spec = ParseJobSpec(job);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              HasSubstr("model.graph.input: is (B, 8) float32; data.tokens feeds int64 token "
                        "windows (B, T)"));

  job.Set("model",
          Json::Object({{"graph", ParseOrDie(trainyard::testing::GptGraphJson(13, 8, 2, 2, 16))}}));
  spec = ParseJobSpec(job);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(SequenceLength(spec->model), 8);
  // Written back with the proto's names, it reads the same.
  StatusOr<JobSpec> again = ParseJobSpec(ToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ToJson(*again).Dump(), ToJson(*spec).Dump());
  EXPECT_EQ(again->model.graph.nodes.size(), 6u);
  EXPECT_EQ(again->model.graph.blocks[0].nodes[2].heads, 2);
}

TEST(ModelGraphTest, HugeAndDeepGraphsAreCheckedWithoutRecursionOrQuadraticWork) {
  // 50,000 nodes written last first: each reads the one after it.
  std::string chain;
  const int n = 50000;
  for (int i = 0; i < n; ++i) {
    chain += std::string(i ? "," : "") + R"({"name": "n)" + std::to_string(i) +
             R"(", "op": "relu", "inputs": [")" +
             (i + 1 < n ? "n" + std::to_string(i + 1) : std::string("x")) + R"("]})";
  }
  StatusOr<GraphSpec> graph = ParseGraphSpec(ParseOrDie(Graph(chain, R"(, "output": "n0")")));
  ASSERT_TRUE(graph.ok()) << graph.status();
  StatusOr<CompiledGraph> g = CompileGraph(*graph);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ops.front().node.name, "n49999");
  // Every node broken: the first 100 problems are named.
  std::string broken;
  for (int i = 0; i < 5000; ++i)
    broken += std::string(i ? "," : "") + R"({"name": "b)" + std::to_string(i) +
              R"(", "op": "nope", "inputs": ["x"]})";
  graph = ParseGraphSpec(ParseOrDie(Graph(broken)));
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().field_violations().size(), 100u);
}

TEST(ModelGraphTest, OutputsSharesBlocksAndRanksThatCannotBeAreNamed) {
  EXPECT_THAT(
      GraphProblems(Graph(R"({"name": "r", "op": "relu", "inputs": ["x"]})", R"(, "output": "x")")),
      HasSubstr("model.graph.output: the output must be a node, not the input \"x\""));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "fc", "op": "linear", "inputs": ["x"],
                                      "out_features": 8, "share": "x"})")),
              HasSubstr("nodes[0].share (fc): shares the weight of \"x\", which is no node of "
                        "this graph (an input has no weight)"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "r", "op": "relu", "inputs": ["x"]})",
                                  R"(, "blocks": [{"name": "spare", "nodes": [
                                        {"name": "q", "op": "nope", "inputs": ["x"]}]}])")),
              HasSubstr("model.graph.blocks[0]: block spare is run by no node"));
  EXPECT_THAT(GraphProblems(Graph(R"({"name": "r", "op": "reshape", "inputs": ["x"],
                                      "shape": [1, 1, 1, 1, 1, 1, 1, 8]})")),
              HasSubstr("reshape: shape needs 1 to 7 entries"));
}

TEST(ModelGraphTest, TheOutputMustFitTheLossAndBatchNormItsBatch) {
  Json job = ParseOrDie(R"({"name": "g", "data": {"tokens": {"path": "t.bin"}},
                           "optimizer": {"sgd": {"lr": 0.1}}})");
  job.Set("model", Json::Object({{"graph", ParseOrDie(R"({
      "input": {"name": "idx", "dtype": "int64", "shape": [16]},
      "nodes": [{"name": "e", "op": "embedding", "inputs": ["idx"], "num_embeddings": 50,
                 "embedding_dim": 8},
                {"name": "f", "op": "flatten", "inputs": ["e"]},
                {"name": "out", "op": "linear", "inputs": ["f"], "out_features": 50}]})")}}));
  StatusOr<JobSpec> spec = ParseJobSpec(job);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              HasSubstr("model.graph.output: is (B, 50); data.tokens needs logits for every "
                        "position: (B, 16, vocabulary)"));
  job = ParseOrDie(R"({"name": "g", "data": {"fashion_mnist": {}}, "batch_size": 1,
                      "optimizer": {"sgd": {"lr": 0.1}}})");
  job.Set("model", Json::Object({{"graph", ParseOrDie(R"({
      "input": {"name": "x", "shape": [1, 28, 28]},
      "nodes": [{"name": "c", "op": "conv2d", "inputs": ["x"], "out_channels": 4,
                 "kernel_size": 28},
                {"name": "bn", "op": "batch_norm", "inputs": ["c"]},
                {"name": "f", "op": "flatten", "inputs": ["bn"]},
                {"name": "fc", "op": "linear", "inputs": ["f"], "out_features": 10}]})")}}));
  spec = ParseJobSpec(job);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              HasSubstr("batch_size: 1 leaves model.graph.nodes[1] (batch_norm) one value per "
                        "channel of (B, 4, 1, 1)"));
  testing::SetPath(&job, "batch_size", 2);
  EXPECT_TRUE(ParseJobSpec(job).ok());
}

TEST(ModelGraphTest, LlamaAndBpeFieldsAreChecked) {
  Json job = ParseOrDie(R"({"name": "l", "data": {"text": {"path": "t.txt"}},
                           "optimizer": {"sgd": {"lr": 0.1}},
                           "model": {"llama": {"n_embd": 35, "n_head": 5, "n_kv_head": 2}}})");
  StatusOr<JobSpec> spec = ParseJobSpec(job);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              AllOf(HasSubstr("model.llama.n_head = 5: must divide model.llama.n_embd = 35 into "
                              "heads of an even size"),
                    HasSubstr("model.llama.n_kv_head = 2: must divide model.llama.n_head = 5")));
  job = ParseOrDie(R"({"name": "l", "data": {"text": {"path": "t.txt", "vocabulary": "bpe"}},
                      "optimizer": {"sgd": {"lr": 0.1}}, "model": {"llama": {}}})");
  spec = ParseJobSpec(job);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              HasSubstr("data.text.tokenizer: required with vocabulary \"bpe\""));
  testing::SetPath(&job, "data.text.tokenizer", "tokenizer.json");
  spec = ParseJobSpec(job);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(SequenceLength(spec->model), 128);
  // The llama entry is its graph: 4 layers of 4 projections, the SwiGLU's 3 (688 wide: 8/3 of
  // 256 rounded up to 8) and 2 norms, the embedding, the final norm and the untied head.
  StatusOr<CompiledGraph> g = CompileGraph(*ModelGraph(spec->model, /*vocab=*/100));
  ASSERT_TRUE(g.ok()) << g.status();
  const int64_t c = 256, kv = 256, hidden = 688;
  EXPECT_EQ(g->parameters,
            100 * c + 4 * (2 * c * c + 2 * kv * c + 3 * c * hidden + 2 * c) + c + 100 * c);
}

}  // namespace
}  // namespace trainyard::spec
