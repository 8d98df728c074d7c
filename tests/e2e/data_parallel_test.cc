// Acceptance for data parallelism: N real rank processes (`trainyard train --nproc N`, Gloo on
// loopback) with batch b per rank must end where one process with batch N x b ends, within
// 1e-5 relative, for the MLP on Fashion-MNIST and a tiny GPT on the King James Bible; with SGD
// and AdamW, gradient accumulation, ZeRO-1, -2 and -3, activation checkpointing and pipeline
// stages (P stages x D replicas with batch b: one process with batch D x b).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "common/json.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "worker/tensor/safetensors.h"

namespace trainyard {
namespace {

using testing::ProcessResult;
using testing::RunProcess;
using testing::TempDir;
using namespace std::chrono_literals;

const std::string kBin = TY_TRAINYARD_BIN;
const std::string kSource = TY_SOURCE_DIR;

struct Job {
  std::string model;      // "mlp" or "gpt"
  std::string optimizer;  // YAML flow mapping
  int64_t accumulation = 1;
  int zero_stage = 0;
  bool activation_checkpointing = false;
  int steps = 20;
  std::string precision = "fp32";
  int pipeline_stages = 1;
  std::string pipeline_schedule = "1f1b";
};

// A job of job.steps steps; `batch` per rank and micro-batch. Dropout is off so ranks draw no
// randomness. The GPT has no biases: the key projection's bias has an exactly zero gradient in
// theory (softmax ignores a shift shared by all scores), so in float32 it gets rounding noise,
// which Adam normalises into full-size steps of random sign, in one process as in N.
std::string WriteSpec(const TempDir& dir, const std::string& name, const Job& job, int64_t batch,
                      int world) {
  const std::string path = dir.path() + "/" + name + ".yaml";
  std::ofstream out(path);
  out << "name: " << name << "\n";
  if (job.model == "mlp") {
    out << "model: {mlp: {sizes: [784, 64, 10]}}\n"
        << "data: {fashion_mnist: {}, num_workers: 0}\n";
  } else {
    out << "model: {gpt: {context: 16, n_layer: 2, n_head: 2, n_embd: 32, dropout: 0, bias: "
           "false}}\n"
        << "data: {text: {path: " << kSource << "/data/kjv.txt, vocabulary: char,"
        << " eval_fraction: 0.01}, num_workers: 0}\n";
  }
  out << "optimizer: " << job.optimizer << "\n"
      << "grad_clip_norm: 1.0\nprecision: " << job.precision << "\n"
      << "batch_size: " << batch << "\nsteps: " << job.steps << "\nseed: 3\n"
      << "eval: {max_batches: 1}\n"
      << "checkpoint: {dir: " << dir.path() << "/" << name << "}\n"
      << "parallelism: {world_size: " << world << ", grad_accumulation_steps: " << job.accumulation
      << ", zero_stage: " << job.zero_stage
      << ", activation_checkpointing: " << (job.activation_checkpointing ? "true" : "false")
      << ", first_bucket_size_mb: 0.01, bucket_size_mb: 0.05, collective_timeout_seconds: 60"
      << ", pipeline_stages: " << job.pipeline_stages
      << ", pipeline_schedule: " << job.pipeline_schedule << "}\n";
  return path;
}

// Trains and returns the final weights; `stdout_json`, when given, receives the summary.
std::map<std::string, Tensor> TrainAndLoad(const TempDir& dir, const std::string& name,
                                           const Job& job, int64_t batch, int world,
                                           std::string* stdout_json = nullptr) {
  const std::string spec = WriteSpec(dir, name, job, batch, world);
  ProcessResult r = RunProcess({kBin, "train", spec, "--quiet", "-o", "json"}, 300s);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err;
  if (stdout_json != nullptr) *stdout_json = r.out;
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/step-%08d", job.steps);
  StatusOr<SafetensorsFile> f =
      LoadSafetensors(dir.path() + "/" + name + step_dir + "/model.safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  std::map<std::string, Tensor> weights;
  if (f.ok()) {
    for (auto& [key, t] : f->tensors) weights[key] = t;
  }
  return weights;
}

// ||a - b|| / ||b|| for every tensor.
void ExpectSameWeights(const std::map<std::string, Tensor>& got,
                       const std::map<std::string, Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what;
  for (const auto& [key, w] : want) {
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << what << ": " << key;
    const std::vector<float> a = ToVector<float>(it->second), b = ToVector<float>(w);
    ASSERT_EQ(a.size(), b.size()) << what << ": " << key;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      norm += double(b[i]) * b[i];
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm)) << what << ": " << key;
  }
}

// The training loss of every step, from the run's metrics.jsonl.
std::vector<double> StepLosses(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    StatusOr<Json> j = Json::Parse(line);
    EXPECT_TRUE(j.ok()) << metrics << ": " << line;
    if (!j.ok() || j->Find("type")->string_value() != "step") continue;
    losses.push_back(j->Find("loss")->number_value());
  }
  return losses;
}

// Every step's loss agrees to 1e-5 relative.
void ExpectSameLosses(const std::string& got, const std::string& want, const Job& job) {
  const std::vector<double> a = StepLosses(got), b = StepLosses(want);
  ASSERT_EQ(a.size(), static_cast<size_t>(job.steps)) << got;
  ASSERT_EQ(b.size(), a.size()) << want;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(b[i])) << "step " << i + 1;
  }
}

// One process with batch N x b (and the same accumulation) against N ranks with batch b: the
// losses of every step and the final weights. With pipeline stages, N = world / stages.
void ExpectEquivalent(const Job& job, int world, int64_t batch = 8) {
  TempDir dir;
  Job single = job;
  single.pipeline_stages = 1;
  const auto one = TrainAndLoad(dir, "one", single, batch * (world / job.pipeline_stages), 1);
  const auto many = TrainAndLoad(dir, "ranks", job, batch, world);
  const std::string what =
      job.model + " " + job.optimizer + " on " + std::to_string(world) + " ranks";
  SCOPED_TRACE(what);
  ExpectSameLosses(dir.path() + "/ranks/metrics.jsonl", dir.path() + "/one/metrics.jsonl", job);
  ExpectSameWeights(many, one, what);
  // And the ranks changed the weights: the runs are not trivially equal.
  TempDir init;
  Job frozen = job;
  frozen.optimizer = "{sgd: {lr: 0}}";
  frozen.pipeline_stages = 1;
  const auto start = TrainAndLoad(init, "start", frozen, batch, 1);
  double moved = 0;
  for (const auto& [key, t] : start) {
    const std::vector<float> a = ToVector<float>(t), b = ToVector<float>(many.at(key));
    for (size_t i = 0; i < a.size(); ++i) moved = std::max(moved, double(std::abs(a[i] - b[i])));
  }
  EXPECT_GT(moved, 1e-3);
}

const char* kSgd = "{sgd: {lr: 0.1, momentum: 0.9}}";
// At lr 0.003 this GPT is chaotic in float32: one process with batch 24 and one with two
// micro-batches of 12 (the same mathematics) already end 2e-4 apart. At 0.001 they agree to 1e-7.
const char* kAdamW = "{adamw: {lr: 0.001, weight_decay: 0.01}}";

TEST(DataParallelTest, MlpWithSgdOnTwoAndThreeRanksMatchesOneProcess) {
  ExpectEquivalent({"mlp", kSgd}, 2);
  ExpectEquivalent({"mlp", kSgd}, 3);
}

TEST(DataParallelTest, MlpWithAdamWOnTwoAndThreeRanksMatchesOneProcess) {
  ExpectEquivalent({"mlp", kAdamW}, 2);
  ExpectEquivalent({"mlp", kAdamW}, 3);
}

TEST(DataParallelTest, GptWithAdamWOnTwoAndThreeRanksMatchesOneProcess) {
  ExpectEquivalent({"gpt", kAdamW}, 2, 4);
  ExpectEquivalent({"gpt", kAdamW}, 3, 4);
}

TEST(DataParallelTest, GradientAccumulationMatchesOneProcess) {
  ExpectEquivalent({"mlp", kAdamW, /*accumulation=*/3}, 2);
  ExpectEquivalent({"gpt", kSgd, /*accumulation=*/2}, 3, 4);
}

TEST(DataParallelTest, ZeroOneMatchesOneProcess) {
  ExpectEquivalent({"mlp", kAdamW, 1, /*zero_stage=*/1}, 3);
  ExpectEquivalent({"gpt", kSgd, 2, /*zero_stage=*/1}, 2, 4);
}

// ZeRO-2 reduce-scatters every micro-batch (accumulation adds into the shards).
TEST(DataParallelTest, ZeroTwoMatchesOneProcessOverFiftySteps) {
  ExpectEquivalent({"mlp", kAdamW, /*accumulation=*/2, /*zero_stage=*/2, false, /*steps=*/50}, 3);
  ExpectEquivalent({"gpt", kAdamW, 1, /*zero_stage=*/2, false, /*steps=*/50}, 2, 4);
}

// ZeRO-3 gathers each unit (GPT block, MLP layer) before its forward and its backward and
// frees it after; the weights live sharded between uses.
TEST(DataParallelTest, ZeroThreeMatchesOneProcessOverFiftySteps) {
  ExpectEquivalent({"mlp", kAdamW, /*accumulation=*/2, /*zero_stage=*/3, false, /*steps=*/50}, 3);
  ExpectEquivalent({"gpt", kAdamW, 1, /*zero_stage=*/3, false, /*steps=*/50}, 2, 4);
}

// fp16 with ZeRO: each rank unscales and checks its gradient shards and the ranks agree on
// skipping, so they train as plain data parallelism does, skipped steps included (here step 6,
// whose gradients overflow at the initial scale of 65536). One process is no reference: its
// per-sample gradients are scaled half as much and overflow at other steps.
TEST(DataParallelTest, Fp16WithZeroMatchesPlainDataParallelism) {
  const Job plain{"mlp", kSgd, 1, 0, false, 20, "fp16"};
  TempDir dir;
  std::string plain_json;
  const auto want = TrainAndLoad(dir, "plain", plain, 8, 2, &plain_json);
  const auto skipped = [](const std::string& json) {
    StatusOr<Json> j = Json::Parse(json);
    return j.ok() ? j->Find("skipped_steps")->number_value() : -1.0;
  };
  EXPECT_GE(skipped(plain_json), 1) << plain_json;
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("zero_stage " + std::to_string(stage));
    Job zero = plain;
    zero.zero_stage = stage;
    std::string json;
    const std::string name = "zero" + std::to_string(stage);
    const auto got = TrainAndLoad(dir, name, zero, 8, 2, &json);
    ExpectSameLosses(dir.path() + "/" + name + "/metrics.jsonl",
                     dir.path() + "/plain/metrics.jsonl", zero);
    ExpectSameWeights(got, want, "fp16");
    EXPECT_EQ(skipped(json), skipped(plain_json));
  }
}

// Pipeline parallelism: the GPT's two blocks on two stages, four micro-batches per step, the
// tied embedding's gradient summed between the first and last stage; alone and with two
// data-parallel replicas per stage; 1F1B and GPipe.
TEST(DataParallelTest, PipelineMatchesOneProcessOverFiftySteps) {
  Job pipeline{"gpt", kAdamW, /*accumulation=*/4, 0, false, /*steps=*/50};
  pipeline.pipeline_stages = 2;
  ExpectEquivalent(pipeline, 2, 8);
  pipeline.pipeline_schedule = "gpipe";
  ExpectEquivalent(pipeline, 4, 4);
  pipeline.pipeline_schedule = "1f1b";
  pipeline.activation_checkpointing = true;
  ExpectEquivalent(pipeline, 4, 4);
}

TEST(DataParallelTest, ActivationCheckpointingMatchesOneProcess) {
  ExpectEquivalent({"gpt", kAdamW, 1, 0, /*activation_checkpointing=*/true}, 2, 4);
  ExpectEquivalent({"gpt", kAdamW, 2, 1, /*activation_checkpointing=*/true}, 3, 4);
  ExpectEquivalent({"gpt", kAdamW, 2, 2, /*activation_checkpointing=*/true}, 2, 4);
  ExpectEquivalent({"gpt", kAdamW, 2, 3, /*activation_checkpointing=*/true}, 2, 4);
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// Checkpoints do not depend on the world size: ZeRO's shards are gathered into the
// unsharded form. 10 steps on 2 ranks (batch 8 each), then 10 more on 4 ranks (batch 4 each) or on
// one process (batch 16) from that checkpoint, end where 20 steps of one process with batch 16 end.
void ExpectZeroResumesOnAnotherWorldSize(int stage) {
  SCOPED_TRACE("zero_stage " + std::to_string(stage));
  const Job zero{"mlp", kAdamW, 1, stage};
  TempDir ref_dir;
  const auto want = TrainAndLoad(ref_dir, "ref", zero, 16, 1);
  for (int resume_world : {4, 1}) {
    TempDir dir;
    std::string spec = WriteSpec(dir, "run", zero, 8, 2);
    ProcessResult r = RunProcess({kBin, "train", spec, "--quiet", "--set", "steps=10"}, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(std::filesystem::exists(dir.path() + "/run/step-00000010/optimizer.safetensors"));
    std::string summary;
    const auto got = TrainAndLoad(dir, "run", zero, 16 / resume_world, resume_world, &summary);
    EXPECT_NE(summary.find("\"resumed_from\":\"" + dir.path() + "/run/step-00000010\""),
              std::string::npos)
        << summary;
    ExpectSameWeights(got, want, "resumed on " + std::to_string(resume_world) + " rank(s)");
  }
}

// A pipeline's checkpoint holds the whole model and optimizer, gathered from its stages: 10
// steps on 2 stages, then 10 more in one process or on 2 stages x 2 replicas, end where 20
// steps of one process end.
TEST(DataParallelTest, PipelineCheckpointsResumeWithoutOrWithOtherStages) {
  Job single{"gpt", kAdamW, /*accumulation=*/4};
  TempDir ref_dir;
  const auto want = TrainAndLoad(ref_dir, "ref", single, 8, 1);
  Job pipeline = single;
  pipeline.pipeline_stages = 2;
  for (const auto& [resumed, world] : {std::pair{single, 1}, std::pair{pipeline, 4}}) {
    TempDir dir;
    std::string spec = WriteSpec(dir, "run", pipeline, 8, 2);
    ProcessResult r = RunProcess({kBin, "train", spec, "--quiet", "--set", "steps=10"}, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = TrainAndLoad(dir, "run", resumed, 8 * resumed.pipeline_stages / world, world);
    ExpectSameWeights(got, want, "resumed on " + std::to_string(world) + " rank(s)");
  }
}

TEST(DataParallelTest, ZeroCheckpointsResumeOnAnotherWorldSize) {
  ExpectZeroResumesOnAnotherWorldSize(1);
  ExpectZeroResumesOnAnotherWorldSize(2);
  ExpectZeroResumesOnAnotherWorldSize(3);
}

}  // namespace
}  // namespace trainyard
