// End-to-end: models the user defines (model.graph, model.llama) trained by the real
// `trainyard train` on the King James Bible, and malformed graphs refused before anything runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::ProcessResult;
using testing::RunProcess;
using testing::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kBin = TY_TRAINYARD_BIN;
const std::string kSource = TY_SOURCE_DIR;
const std::string kText = kSource + "/data/kjv.txt";

ProcessResult Train(std::vector<std::string> args) {
  args.insert(args.begin(), {kBin, "train"});
  return RunProcess(args, 600s);
}

// The validation losses the progress lines report, in order.
std::vector<double> EvalCurve(const std::string& err) {
  std::vector<double> curve;
  std::regex eval_re(R"(eval at step (\d+): loss ([0-9.]+))");
  for (std::sregex_iterator m(err.begin(), err.end(), eval_re), end; m != end; ++m)
    curve.push_back(std::stod((*m)[2]));
  return curve;
}

// 90 steps with evaluations at 30, 60 and 90: the loss falls at each, to below `ceiling`.
void ExpectLearns(const ProcessResult& r, double ceiling) {
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> curve = EvalCurve(r.err);
  ASSERT_EQ(curve.size(), 3u) << r.err;
  EXPECT_LT(curve[1], curve[0]);
  EXPECT_LT(curve[2], curve[1]);
  EXPECT_LT(curve[2], ceiling);
  std::cout << "validation loss: " << curve[0] << " " << curve[1] << " " << curve[2] << "\n";
}

std::vector<std::string> ShortRun(const std::string& spec, const std::string& dir) {
  return {spec,
          "--set",
          "data.text.path=" + kText,
          "--set",
          "steps=90",
          "--set",
          "eval.every_steps=30",
          "--set",
          "schedule.cosine.warmup_steps=10",
          "--set",
          "batch_size=8",
          "--set",
          "checkpoint.dir=" + dir};
}

TEST(ModelGraphCliTest, TheGptGraphExampleTrainsAndPrintsItsSizeAndFlops) {
  ASSERT_TRUE(fs::exists(kText)) << kText << " is missing: run scripts/get-data.sh";
  TempDir dir;
  const ProcessResult r = Train(ShortRun(kSource + "/examples/graph-kjv-gpt.yaml", dir.path()));
  // nanoGPT's count for 4 blocks of 256 with 128 tokens and positions; its forward FLOPs.
  EXPECT_THAT(r.err, HasSubstr("graph-kjv-gpt: graph (3,225,088 parameters, "));
  EXPECT_THAT(r.err, HasSubstr(" forward FLOPs per sample)"));
  ExpectLearns(r, 3.3);  // a uniform guess over the ~75 characters is ln 75 = 4.3
}

TEST(ModelGraphCliTest, TheLlamaGraphExampleTrains) {
  ASSERT_TRUE(fs::exists(kText)) << kText << " is missing: run scripts/get-data.sh";
  TempDir dir;
  const ProcessResult r = Train(ShortRun(kSource + "/examples/graph-kjv-llama.yaml", dir.path()));
  EXPECT_THAT(r.err, HasSubstr("graph-kjv-llama: graph ("));
  ExpectLearns(r, 3.3);
}

TEST(ModelGraphCliTest, TheLlamaZooEntryTrainsOnBpeTokensAndItsCheckpointStartsAnotherRun) {
  ASSERT_TRUE(fs::exists(kText)) << kText << " is missing: run scripts/get-data.sh";
  TempDir dir;
  const std::string spec = dir.path() + "/llama.yaml";
  std::ofstream(spec) << "name: kjv-llama\n"
                         "model: {llama: {context: 64, n_layer: 2, n_head: 4, n_kv_head: 2, "
                         "n_embd: 64}}\n"
                         "data: {text: {path: x, vocabulary: bpe, tokenizer: " +
                             kSource +
                             "/tests/golden/bpe_tokenizer.json}}\n"
                             "optimizer: {adamw: {lr: 0.003, weight_decay: 0.1}}\n"
                             "schedule: {cosine: {}}\neval: {max_batches: 10}\n";
  ProcessResult r = Train(ShortRun(spec, dir.path() + "/run"));
  EXPECT_THAT(r.err, HasSubstr("kjv-llama: llama ("));
  EXPECT_THAT(r.err, HasSubstr("BPE tokens of 600"));
  ExpectLearns(r, 5.5);  // a uniform guess over the 600 tokens is ln 600 = 6.4
  const double trained = EvalCurve(r.err).back();
  // Its weights, by LlamaForCausalLM's names, start a fresh run of the same model.
  std::vector<std::string> again = ShortRun(spec, dir.path() + "/again");
  again.insert(again.end(), {"--set", "checkpoint.init_from=" + dir.path() + "/run/step-00000090",
                             "--set", "steps=30"});
  r = Train(again);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> curve = EvalCurve(r.err);
  ASSERT_EQ(curve.size(), 1u) << r.err;
  EXPECT_LT(curve[0], trained + 0.3) << "it starts from the trained weights";
}

TEST(ModelGraphCliTest, MalformedGraphsAreRefusedBeforeAnythingRuns) {
  TempDir dir;
  const std::string spec = dir.path() + "/bad.yaml";
  std::ofstream(spec) << "name: bad\n"
                         "model:\n  graph:\n    input: {name: idx, dtype: int64, shape: [16]}\n"
                         "    nodes:\n"
                         "      - {name: wte, op: embedding, inputs: [idx], num_embeddings: 80,"
                         " embedding_dim: 32}\n"
                         "      - {name: a, op: add, inputs: [wte, b]}\n"
                         "      - {name: b, op: layer_norm, inputs: [a]}\n"
                         "      - {name: head, op: lienar, inputs: [b], out_features: 80}\n"
                         "data: {text: {path: " +
                             kText +
                             "}}\n"
                             "optimizer: {sgd: {lr: 0.1}}\nsteps: 1\n";
  const ProcessResult r = Train({spec});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("model.graph.nodes[3].op (head): unknown op \"lienar\""));
  EXPECT_THAT(r.err, HasSubstr("the ops are linear,"));
}

}  // namespace
}  // namespace trainyard
