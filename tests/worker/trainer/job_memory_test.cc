// common/spec/job_memory.h against the engine: for small configs of every zoo model, the
// estimate's parameters and optimizer state equal what the built model and its optimizer hold,
// and its activations lie close to the CPU allocator's measured peak of a training step beyond
// the weights, gradients and optimizer state. Then the issue's cases and the examples, and the
// spec's maxima (no overflow).
#include "common/spec/job_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "common/json.h"
#include "kernels/cpu/parallel.h"
#include "tests/testing/dist.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/autograd/autocast.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/dist/reducer.h"
#include "worker/dist/zero.h"
#include "worker/nn/zoo.h"
#include "worker/ops/loss.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/storage.h"

namespace trainyard::spec {
namespace {

using trainer::testing::ParseSpec;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kVocab = 65;  // the text vocabulary these tests give a GPT with vocab_size 0

// The model the trainer builds for `spec` (Trainer::Init's configs).
std::shared_ptr<nn::Module> BuildModelOf(const JobSpec& spec, int64_t vocab, Generator* gen) {
  const ModelSpec& m = spec.model;
  nn::ModelConfigs c;
  c.mlp = {m.mlp.sizes, m.mlp.activation, m.mlp.dropout};
  c.cnn = {m.cnn.in_channels, m.cnn.image_size, m.cnn.num_classes, m.cnn.channels1,
           m.cnn.channels2,   m.cnn.hidden,     m.cnn.dropout};
  c.resnet = {m.resnet.in_channels, m.resnet.num_classes, m.resnet.base_width, m.resnet.blocks};
  c.gpt = {m.gpt.vocab_size > 0 ? m.gpt.vocab_size : vocab,
           m.gpt.context,
           m.gpt.n_layer,
           m.gpt.n_head,
           m.gpt.n_embd,
           m.gpt.dropout,
           m.gpt.bias,
           spec.parallelism.activation_checkpointing};
  StatusOr<std::shared_ptr<nn::Module>> model = nn::BuildModel(m.arch, c, gen);
  TY_CHECK(model.ok()) << model.status();
  return *model;
}

// The optimizer the trainer makes for `spec`.
std::unique_ptr<optim::Optimizer> OptimizerOf(const OptimizerSpec& o,
                                              std::vector<optim::NamedTensor> params) {
  if (o.kind == "sgd") {
    const SgdSpec& s = o.sgd;
    return *optim::SGD::Create(std::move(params),
                               {s.lr, s.momentum, s.dampening, s.nesterov, s.weight_decay});
  }
  const AdamSpec& a = o.kind == "adam" ? o.adam : o.adamw;
  if (o.kind == "adam") {
    return *optim::Adam::Create(std::move(params), {a.lr, a.beta1, a.beta2, a.eps, a.weight_decay});
  }
  return *optim::AdamW::Create(std::move(params), {a.lr, a.beta1, a.beta2, a.eps, a.weight_decay});
}

// The autocast dtype of spec.precision (kFloat32: off), as the trainer chooses it.
DType AutocastOf(const JobSpec& spec) {
  if (spec.precision == "bf16") return DType::kBFloat16;
  return spec.precision == "fp16" ? DType::kFloat16 : DType::kFloat32;
}

// A random batch of `n` samples in the shapes the job's data gives the model.
std::pair<Tensor, Tensor> RandomBatch(const JobSpec& spec, int64_t vocab, int64_t n,
                                      Generator* gen) {
  const ModelSpec& m = spec.model;
  const TensorOptions f32 = Options(DType::kFloat32);
  if (m.arch == "gpt") {
    const int64_t v = m.gpt.vocab_size > 0 ? m.gpt.vocab_size : vocab;
    return {RandInt({n, m.gpt.context}, 0, v, Options(DType::kInt64), gen),
            RandInt({n, m.gpt.context}, 0, v, Options(DType::kInt64), gen)};
  }
  Tensor input;
  int64_t classes = 0;
  if (m.arch == "mlp") {
    input = Randn({n, m.mlp.sizes.front()}, f32, gen);
    classes = m.mlp.sizes.back();
  } else if (m.arch == "cnn") {
    input = Randn({n, m.cnn.in_channels, m.cnn.image_size, m.cnn.image_size}, f32, gen);
    classes = m.cnn.num_classes;
  } else {
    input = Randn({n, m.resnet.in_channels, 28, 28}, f32, gen);
    classes = m.resnet.num_classes;
  }
  return {input, RandInt({n}, 0, classes, Options(DType::kInt64), gen)};
}

// One micro-batch as Trainer::ForwardBackward runs it: forward and loss under the spec's
// autocast, then backward. Every tensor it makes is gone when it returns.
void ForwardBackward(nn::Module& model, const JobSpec& spec, int64_t vocab, Generator* gen) {
  auto [input, target] = RandomBatch(spec, vocab, spec.batch_size, gen);
  Tensor loss;
  {
    AutocastGuard autocast(AutocastOf(spec));
    Tensor out = model.Forward(input);
    loss = ops::CrossEntropy(ops::Reshape(out, {-1, out.size(-1)}), ops::Reshape(target, {-1}));
  }
  ASSERT_TRUE(autograd::Backward(loss).ok());
}

struct Measured {
  int64_t parameters = 0;
  int64_t buffer_bytes = 0;     // batch norm's running statistics
  int64_t optimizer_bytes = 0;  // the optimizer's state after a step
  // Peaks beyond what was allocated before the measured micro-batch (the weights, optimizer
  // state and, when kept, the gradients): of the micro-batch, and of an evaluation batch.
  int64_t step = 0;
  int64_t eval = 0;
};

// Builds the model and optimizer and takes one step (so the optimizer state exists). Then
// measures the CPU allocator's peak over a second micro-batch, with the gradients kept
// (zeroed, as a later micro-batch of gradient accumulation or data parallel's buckets see
// them) when `keep_grads`, else dropped as a one-process run's zero_grad does; and over an
// evaluation batch.
Measured Measure(const JobSpec& spec, bool keep_grads, int64_t vocab = kVocab) {
  kernels::cpu::SetNumThreads(2);
  const Device cpu = Device::Cpu();
  Generator gen(spec.seed);
  std::shared_ptr<nn::Module> model = BuildModelOf(spec, vocab, &gen);
  model->Train();
  std::unique_ptr<optim::Optimizer> optimizer =
      OptimizerOf(spec.optimizer, model->NamedParameters());
  ForwardBackward(*model, spec, vocab, &gen);
  optimizer->Step();
  optimizer->ZeroGrad(/*set_to_none=*/!keep_grads);
  Measured m;
  m.parameters = model->NumParameters();
  for (const auto& [name, t] : model->NamedBuffers())
    m.buffer_bytes += t.numel() * static_cast<int64_t>(ElementSize(t.dtype()));
  m.optimizer_bytes = dist::OptimizerStateBytes(*optimizer);
  const int64_t before = DeviceMemoryStats(cpu).allocated_bytes;
  ResetMemoryPeak(cpu);
  ForwardBackward(*model, spec, vocab, &gen);
  m.step = DeviceMemoryStats(cpu).peak_allocated_bytes - before;
  if (keep_grads) {
    EXPECT_EQ(DeviceMemoryStats(cpu).allocated_bytes, before) << "the step left tensors behind";
  } else {
    optimizer->ZeroGrad(/*set_to_none=*/true);  // as the trainer does before it evaluates
  }

  model->Eval();
  autograd::NoGradGuard no_grad;
  const int64_t eval_batch = spec.eval.batch_size > 0 ? spec.eval.batch_size : spec.batch_size;
  ResetMemoryPeak(cpu);
  {
    auto [input, target] = RandomBatch(spec, vocab, eval_batch, &gen);
    AutocastGuard autocast(AutocastOf(spec));
    Tensor out = model->Forward(input);
    Tensor flat = ops::Reshape(out, {-1, out.size(-1)});
    Tensor loss = ops::CrossEntropy(flat, ops::Contiguous(ops::Reshape(target, {-1})));
    Tensor best = ops::Argmax(flat, 1);
  }
  m.eval = DeviceMemoryStats(cpu).peak_allocated_bytes - before;
  return m;
}

// Checks the estimate of `json` against the engine and prints a row of the table:
//  - parameters, weights, gradients and optimizer state exactly;
//  - activations within [0.8, 1.25] of the measured peak beyond them, for a micro-batch that
//    adds into kept gradients (the spec with grad_accumulation_steps 2);
//  - the whole estimate within [0.8, 1.5] of a one-process step's peak, where backward frees
//    activations while it makes gradients (so the allocated peak can be below the sum).
void ExpectMatchesTheEngine(const std::string& name, const std::string& json) {
  SCOPED_TRACE(name);
  const JobSpec spec = ParseSpec(json);
  JobSpec accumulating = spec;
  accumulating.parallelism.grad_accumulation_steps = 2;
  const MemoryEstimate e = EstimateRankMemory(accumulating, kVocab);
  const Measured m = Measure(spec, /*keep_grads=*/true);
  EXPECT_EQ(e.parameters, m.parameters);
  EXPECT_EQ(e.weights_bytes, 4 * m.parameters + m.buffer_bytes);
  EXPECT_EQ(e.gradients_bytes, 4 * m.parameters);
  EXPECT_EQ(e.optimizer_bytes, m.optimizer_bytes);
  const int64_t measured = std::max(m.step, m.eval);
  const double ratio = static_cast<double>(e.activations_bytes) / static_cast<double>(measured);

  const MemoryEstimate one = EstimateRankMemory(spec, kVocab);
  const Measured dropped = Measure(spec, /*keep_grads=*/false);
  const int64_t step_peak =
      std::max(dropped.step, dropped.eval) + 4 * m.parameters + m.buffer_bytes + m.optimizer_bytes;
  const double total_ratio =
      static_cast<double>(one.total_bytes()) / static_cast<double>(step_peak);
  std::printf("  | %-32s | %9lld | %9lld | %.2f | %9lld | %9lld | %.2f |\n", name.c_str(),
              static_cast<long long>(measured), static_cast<long long>(e.activations_bytes), ratio,
              static_cast<long long>(step_peak), static_cast<long long>(one.total_bytes()),
              total_ratio);
  EXPECT_GE(ratio, 0.8) << "estimate " << e.activations_bytes << ", measured " << measured;
  EXPECT_LE(ratio, 1.25) << "estimate " << e.activations_bytes << ", measured " << measured;
  EXPECT_GE(total_ratio, 0.8) << one.Describe() << "; measured " << step_peak;
  EXPECT_LE(total_ratio, 1.5) << one.Describe() << "; measured " << step_peak;
}

std::string MlpJson(const std::string& mlp, const std::string& rest) {
  return R"({"model": {"mlp": {)" + mlp + R"(}}, "data": {"csv": {"path": "x.csv"}}, )" + rest +
         "}";
}
std::string CnnJson(const std::string& cnn, const std::string& rest) {
  return R"({"model": {"cnn": {)" + cnn + R"(}}, "data": {"fashion_mnist": {}}, )" + rest + "}";
}
std::string ResNetJson(const std::string& resnet, const std::string& rest) {
  return R"({"model": {"resnet": {"in_channels": 1, )" + resnet +
         R"(}}, "data": {"fashion_mnist": {}}, )" + rest + "}";
}
std::string GptJson(const std::string& gpt, const std::string& rest) {
  return R"({"model": {"gpt": {)" + gpt + R"(}}, "data": {"text": {"path": "x.txt"}}, )" + rest +
         "}";
}

TEST(JobMemoryTest, MlpMatchesTheBuiltModelAndTheMeasuredPeak) {
  ExpectMatchesTheEngine(
      "mlp relu adamw",
      MlpJson(R"("sizes": [64, 128, 10])", R"("optimizer": {"adamw": {}}, "batch_size": 32)"));
  ExpectMatchesTheEngine("mlp fashion-mlp (784-512-256-10)",
                         MlpJson(R"("sizes": [784, 512, 256, 10])",
                                 R"("optimizer": {"adamw": {}}, "batch_size": 64)"));
  ExpectMatchesTheEngine("mlp gelu dropout sgd momentum",
                         MlpJson(R"("sizes": [100, 200, 200, 10], "activation": "gelu",
                                    "dropout": 0.2)",
                                 R"("optimizer": {"sgd": {"momentum": 0.9}}, "batch_size": 50)"));
  ExpectMatchesTheEngine("mlp tanh sgd",
                         MlpJson(R"("sizes": [32, 64, 64, 5], "activation": "tanh")",
                                 R"("optimizer": {"sgd": {}}, "batch_size": 128)"));
  ExpectMatchesTheEngine("mlp tanh dropout bf16 adam",
                         MlpJson(R"("sizes": [32, 96, 64, 5], "activation": "tanh",
                                    "dropout": 0.5)",
                                 R"("optimizer": {"adam": {}}, "batch_size": 64,
                                    "precision": "bf16")"));
  ExpectMatchesTheEngine(
      "mlp one layer, batch 1",
      MlpJson(R"("sizes": [784, 10])", R"("optimizer": {"sgd": {}}, "batch_size": 1)"));
  ExpectMatchesTheEngine("mlp relu bf16 wide batch",
                         MlpJson(R"("sizes": [64, 256, 10])",
                                 R"("optimizer": {"adamw": {}}, "batch_size": 512,
                                    "precision": "bf16")"));
}

TEST(JobMemoryTest, CnnMatchesTheBuiltModelAndTheMeasuredPeak) {
  ExpectMatchesTheEngine("cnn small dropout adamw",
                         CnnJson(R"("channels1": 4, "channels2": 8, "hidden": 16)",
                                 R"("optimizer": {"adamw": {}}, "batch_size": 8)"));
  ExpectMatchesTheEngine("cnn no dropout sgd momentum",
                         CnnJson(R"("channels1": 8, "channels2": 4, "hidden": 32, "dropout": 0)",
                                 R"("optimizer": {"sgd": {"momentum": 0.9}}, "batch_size": 16)"));
  ExpectMatchesTheEngine(
      "cnn fashion-cnn, batch 32",
      CnnJson(R"("hidden": 128)", R"("optimizer": {"adamw": {}}, "batch_size": 32)"));
  ExpectMatchesTheEngine("cnn bf16", CnnJson(R"("channels1": 4, "channels2": 8, "hidden": 16)",
                                             R"("optimizer": {"adam": {}}, "batch_size": 8,
                                    "precision": "bf16")"));
}

TEST(JobMemoryTest, ResNetMatchesTheBuiltModelAndTheMeasuredPeak) {
  ExpectMatchesTheEngine("resnet width 4 [1,1,1,1]",
                         ResNetJson(R"("base_width": 4, "blocks": [1, 1, 1, 1])",
                                    R"("optimizer": {"sgd": {"momentum": 0.9}}, "batch_size": 4)"));
  ExpectMatchesTheEngine("resnet width 8 [2,1,1,2]",
                         ResNetJson(R"("base_width": 8, "blocks": [2, 1, 1, 2])",
                                    R"("optimizer": {"adamw": {}}, "batch_size": 2)"));
  ExpectMatchesTheEngine("resnet bf16", ResNetJson(R"("base_width": 4, "blocks": [1, 2, 1, 1])",
                                                   R"("optimizer": {"adam": {}}, "batch_size": 4,
                                       "precision": "bf16")"));
}

TEST(JobMemoryTest, GptMatchesTheBuiltModelAndTheMeasuredPeak) {
  const std::string small = R"("context": 16, "n_layer": 2, "n_head": 2, "n_embd": 32)";
  const std::string adamw = R"("optimizer": {"adamw": {}}, "batch_size": 4)";
  ExpectMatchesTheEngine("gpt small", GptJson(small, adamw));
  ExpectMatchesTheEngine("gpt no bias", GptJson(small + R"(, "bias": false)", adamw));
  ExpectMatchesTheEngine("gpt dropout", GptJson(small + R"(, "dropout": 0.1)", adamw));
  ExpectMatchesTheEngine("gpt large vocab (logits)",
                         GptJson(small + R"(, "vocab_size": 1024)", adamw));
  ExpectMatchesTheEngine("gpt bf16", GptJson(small, adamw + R"(, "precision": "bf16")"));
  ExpectMatchesTheEngine("gpt bf16 dropout", GptJson(small + R"(, "dropout": 0.2)",
                                                     adamw + R"(, "precision": "bf16")"));
  ExpectMatchesTheEngine("gpt 1 layer, 1 head, batch 1",
                         GptJson(R"("context": 8, "n_layer": 1, "n_head": 1, "n_embd": 16)",
                                 R"("optimizer": {"sgd": {}}, "batch_size": 1)"));
}

// Long contexts, where the (B, nh, T, T) attention tensors dominate, and checkpointing.
TEST(JobMemoryTest, GptAttentionAndCheckpointingMatchTheMeasuredPeak) {
  const std::string sgd = R"("optimizer": {"sgd": {}}, "batch_size": 4)";
  const std::string ckpt = R"(, "parallelism": {"activation_checkpointing": true})";
  const std::string long_context = R"("context": 96, "n_head": 4, "n_embd": 32)";
  ExpectMatchesTheEngine("gpt context 96 (T x T)",
                         GptJson(long_context + R"(, "n_layer": 2)", sgd));
  ExpectMatchesTheEngine("gpt context 96 dropout",
                         GptJson(long_context + R"(, "n_layer": 2, "dropout": 0.1)", sgd));
  ExpectMatchesTheEngine("gpt context 96 checkpointing",
                         GptJson(long_context + R"(, "n_layer": 3)", sgd + ckpt));
  ExpectMatchesTheEngine("gpt context 96 dropout bf16 ckpt",
                         GptJson(long_context + R"(, "n_layer": 3, "dropout": 0.1)",
                                 sgd + R"(, "precision": "bf16")" + ckpt));
  const std::string four = R"("context": 32, "n_layer": 4, "n_head": 2, "n_embd": 32)";
  ExpectMatchesTheEngine("gpt checkpointing adamw",
                         GptJson(four, R"("optimizer": {"adamw": {}}, "batch_size": 4)" + ckpt));
  ExpectMatchesTheEngine("gpt checkpointing dropout adam",
                         GptJson(four + R"(, "dropout": 0.1)",
                                 R"("optimizer": {"adam": {}}, "batch_size": 4)" + ckpt));
}

TEST(JobMemoryTest, EvaluationWithALargerBatchCountsWhenItsPeakIsHigher) {
  ExpectMatchesTheEngine("mlp eval batch 2048",
                         MlpJson(R"("sizes": [64, 128, 10])",
                                 R"("optimizer": {"sgd": {}}, "batch_size": 8,
                                    "eval": {"batch_size": 2048})"));
  ExpectMatchesTheEngine("gpt eval batch 64",
                         GptJson(R"("context": 16, "n_layer": 1, "n_head": 2, "n_embd": 32)",
                                 R"("optimizer": {"sgd": {}}, "batch_size": 2,
                                    "eval": {"batch_size": 64})"));
}

// The real Trainer (one process, its data loader, evaluation and all): its parameters and
// optimizer state are the estimate's, and its steps' peak lies close to the estimate's total.
void ExpectTrainerWithinTheEstimate(const JobSpec& spec) {
  SCOPED_TRACE(ToJson(spec).Dump());
  const int64_t baseline = DeviceMemoryStats(Device::Cpu()).allocated_bytes;
  int64_t peak = 0;
  trainer::TrainerOptions options;
  options.on_step = [&](const trainer::StepMetrics& m) {
    peak = std::max(peak, m.memory.peak_allocated_bytes - baseline);
  };
  StatusOr<std::unique_ptr<trainer::Trainer>> t = trainer::Trainer::Create(spec, options);
  ASSERT_TRUE(t.ok()) << t.status();
  const MemoryEstimate e = EstimateRankMemory(spec, (*t)->data().num_classes);
  EXPECT_EQ(e.parameters, (*t)->num_parameters());
  ASSERT_TRUE((*t)->Run().ok());
  EXPECT_EQ(e.optimizer_bytes, (*t)->optimizer_state_bytes());
  const double ratio = static_cast<double>(e.total_bytes()) / static_cast<double>(peak);
  std::printf("  trainer %s: measured peak %lld, estimated %lld, ratio %.2f\n", spec.name.c_str(),
              static_cast<long long>(peak), static_cast<long long>(e.total_bytes()), ratio);
  EXPECT_GE(ratio, 0.8) << e.Describe();
  EXPECT_LE(ratio, 1.5) << e.Describe();
}

// A tiny GPT on the trainer tests' corpus (written to `text`), with `extra` fields.
JobSpec TinyGptJob(const std::string& text, const std::string& extra) {
  return ParseSpec(R"({"name": "gpt", "model": {"gpt": {"context": 32, "n_layer": 2,
      "n_head": 2, "n_embd": 32, "dropout": 0.1}}, "optimizer": {"adamw": {}},
      "batch_size": 8, "steps": 3, "eval": {"max_batches": 1},
      "data": {"num_workers": 0, "text": {"path": )" +
                   Json(text).Dump() + "}}" + extra + "}");
}

TEST(JobMemoryTest, TheTrainersPeakLiesWithinTheEstimate) {
  trainer::testing::TempDir dir;
  const std::string text = dir.path() + "/corpus.txt", csv = dir.path() + "/rows.csv";
  trainer::testing::WriteGptCorpus(text);
  std::string rows;
  for (int i = 0; i < 256; ++i) {
    rows += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(i % 3);
    rows += "\n";
  }
  trainer::testing::WriteRaw(csv, rows);
  ExpectTrainerWithinTheEstimate(TinyGptJob(text, ""));
  const std::string mlp = R"({"name": "mlp", "model": {"mlp": {"sizes": [2, 256, 256, 3]}},
      "optimizer": {"sgd": {"momentum": 0.9}}, "batch_size": 64, "steps": 3,
      "data": {"num_workers": 0, "csv": {"path": )";
  ExpectTrainerWithinTheEstimate(ParseSpec(mlp + Json(csv).Dump() + "}}}"));
}

// Three ranks of the real Trainer over Gloo (threads), ZeRO stages 1 to 3: each holds exactly
// the estimate's share of the optimizer state, and at most the estimate's gradient and weight
// memory
// (ZeRO-2's estimate counts the largest buckets that can be alive at once; the measured peak
// is of the buckets that were). Returns rank 0's gradient bytes.
int64_t ExpectTrainerZeroRanksWithinTheEstimate(int stage) {
  SCOPED_TRACE("zero_stage " + std::to_string(stage));
  trainer::testing::TempDir dir;
  const std::string text = dir.path() + "/corpus.txt";
  trainer::testing::WriteGptCorpus(text);
  const JobSpec spec = TinyGptJob(
      text, R"(, "parallelism": {"world_size": 3, "zero_stage": )" + std::to_string(stage) + R"(,
      "bucket_size_mb": 0.02, "first_bucket_size_mb": 0.005})");
  std::vector<int64_t> state(3), parameters(3), vocab(3), grads(3), weights(3);
  ::trainyard::testing::RunRanks(3, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    trainer::TrainerOptions options;
    options.process_group = std::move(group);
    StatusOr<std::unique_ptr<trainer::Trainer>> t = trainer::Trainer::Create(spec, options);
    ASSERT_TRUE(t.ok()) << "rank " << rank << ": " << t.status();
    ASSERT_TRUE((*t)->Run().ok());
    state[rank] = (*t)->optimizer_state_bytes();
    grads[rank] = (*t)->gradient_bytes();
    weights[rank] = (*t)->weight_bytes();
    parameters[rank] = (*t)->num_parameters();
    vocab[rank] = (*t)->data().num_classes;
  });
  const MemoryEstimate e = EstimateRankMemory(spec, vocab[0]);
  const MemoryEstimate unsharded = EstimateRankMemory(TinyGptJob(text, ""), vocab[0]);
  EXPECT_LT(e.optimizer_bytes, unsharded.optimizer_bytes * 3 / 4);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(state[rank], e.optimizer_bytes) << "rank " << rank;
    EXPECT_EQ(parameters[rank], e.parameters) << "rank " << rank;
    if (stage == 1) {
      EXPECT_EQ(grads[rank], e.gradients_bytes) << "rank " << rank;
    }
    EXPECT_LE(grads[rank], e.gradients_bytes) << "rank " << rank;
    EXPECT_LE(weights[rank], e.weights_bytes) << "rank " << rank;
  }
  return grads[0];
}

// ZeRO-3's estimate follows its units (the GPT's two blocks and the root) rather than the
// bucket sizes. (With two blocks, the root and both blocks are gathered at once, so ZeRO-3
// holds no less than the whole weights here.)
TEST(JobMemoryTest, EachZeroRankOfTheTrainerHoldsTheEstimatedShare) {
  const int64_t one = ExpectTrainerZeroRanksWithinTheEstimate(1);
  const int64_t two = ExpectTrainerZeroRanksWithinTheEstimate(2);
  EXPECT_LT(two, one * 4 / 5);  // ZeRO-2 keeps no whole buffers
  ExpectTrainerZeroRanksWithinTheEstimate(3);
}

// ZeRO-1 and the buckets: the estimate's sums equal what dist::PlanBuckets gives the real
// model's parameters (each bucket padded to a multiple of the world size; ZeRO's optimizer runs
// over one chunk of each).
void ExpectBucketsMatch(const std::string& json, int world, int64_t state_per_element) {
  SCOPED_TRACE(json);
  JobSpec spec = ParseSpec(json);
  Generator gen(0);
  std::shared_ptr<nn::Module> model = BuildModelOf(spec, kVocab, &gen);
  const ParallelismSpec& p = spec.parallelism;
  int64_t padded = 0, chunks = 0;
  std::vector<int64_t> sizes;  // padded, per bucket
  const std::vector<optim::NamedTensor> params = model->NamedParameters();
  for (const std::vector<size_t>& bucket :
       dist::PlanBuckets(params, static_cast<int64_t>(p.first_bucket_size_mb * (1 << 20)),
                         static_cast<int64_t>(p.bucket_size_mb * (1 << 20)))) {
    int64_t n = 0;
    for (size_t k : bucket) n += params[k].second.numel();
    const int64_t chunk = (n + world - 1) / world;
    sizes.push_back(chunk * world);
    padded += chunk * world;
    chunks += chunk;
  }
  const MemoryEstimate e = EstimateRankMemory(spec, kVocab);
  const bool zero = p.zero_stage >= 1;
  // ZeRO-2: the four largest buckets can be alive at once, and a master chunk is kept.
  std::sort(sizes.rbegin(), sizes.rend());
  const int64_t buffers =
      p.zero_stage == 2 ? std::accumulate(sizes.begin(), sizes.begin() + 4, int64_t{0}) : padded;
  EXPECT_EQ(e.gradients_bytes, 4 * buffers + (zero ? 4 * chunks : 0));
  EXPECT_EQ(e.optimizer_bytes, state_per_element * (zero ? chunks : model->NumParameters()) +
                                   (p.zero_stage == 2 ? 4 * chunks : 0));
}

TEST(JobMemoryTest, DataParallelBucketsAndZeroShardsAreExact) {
  const std::string gpt = R"("model": {"gpt": {"context": 16, "n_layer": 3, "n_head": 2,
                                                "n_embd": 48}}, "data": {"text": {"path": "x"}})";
  ExpectBucketsMatch("{" + gpt + R"(, "optimizer": {"adamw": {}},
      "parallelism": {"world_size": 3, "zero_stage": 1, "bucket_size_mb": 0.01,
                      "first_bucket_size_mb": 0.002}})",
                     3, 8);
  ExpectBucketsMatch("{" + gpt + R"(, "optimizer": {"sgd": {"momentum": 0.5}},
      "parallelism": {"world_size": 7, "zero_stage": 1}})",
                     7, 4);
  ExpectBucketsMatch("{" + gpt + R"(, "optimizer": {"adamw": {}},
      "parallelism": {"world_size": 4, "zero_stage": 2, "bucket_size_mb": 0.01,
                      "first_bucket_size_mb": 0.002}})",
                     4, 8);
  ExpectBucketsMatch("{" + gpt + R"(, "optimizer": {"adam": {}},
      "parallelism": {"world_size": 5, "bucket_size_mb": 0.05,
                      "first_bucket_size_mb": 0.05}})",
                     5, 8);
  ExpectBucketsMatch(ResNetJson(R"("base_width": 8, "blocks": [2, 1, 1, 2])",
                                R"("optimizer": {"adamw": {}}, "parallelism": {"world_size": 6,
                                   "zero_stage": 1, "bucket_size_mb": 0.02,
                                   "first_bucket_size_mb": 0.01})"),
                     6, 8);
}

TEST(JobMemoryTest, ZeroShardsTheOptimizerStateAcrossRanks) {
  const std::string gpt = R"({"model": {"gpt": {"n_layer": 4, "n_embd": 256}},
      "data": {"text": {"path": "x"}}, "optimizer": {"adamw": {}})";
  const MemoryEstimate one = EstimateRankMemory(ParseSpec(gpt + "}"), 256);
  const MemoryEstimate eight = EstimateRankMemory(
      ParseSpec(gpt + R"(, "parallelism": {"world_size": 8, "zero_stage": 1}})"), 256);
  EXPECT_EQ(one.optimizer_bytes, 8 * one.parameters);
  EXPECT_NEAR(static_cast<double>(eight.optimizer_bytes), one.optimizer_bytes / 8.0, 8 * 8 * 8);
  EXPECT_EQ(eight.parameters, one.parameters);
  EXPECT_EQ(eight.weights_bytes, one.weights_bytes);
}

// The issue's specs: each validated, and each would have been OOM-killed or aborted.
TEST(JobMemoryTest, TheIssuesSpecsNeedFarMoreThan24GiB) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mlp of 5e9 parameters",
       MlpJson(R"("sizes": [100000, 50000, 100000])", R"("optimizer": {"adamw": {}})")},
      {"gpt context 65536",
       GptJson(R"("context": 65536)", R"("optimizer": {"adamw": {}}, "batch_size": 32)")},
      {"gpt batch 1048576", GptJson("", R"("optimizer": {"adamw": {}}, "batch_size": 1048576)")},
  };
  for (const auto& [name, json] : cases) {
    const MemoryEstimate e = EstimateRankMemory(ParseSpec(json), 256);
    std::printf("  %-22s %s\n", name.c_str(), e.Describe().c_str());
    EXPECT_GT(e.total_bytes(), 100 * kGiB) << name << ": " << e.Describe();
  }
  const MemoryEstimate mlp = EstimateRankMemory(ParseSpec(cases[0].second), 256);
  EXPECT_EQ(mlp.parameters, 100001LL * 50000 + 50001LL * 100000);
  EXPECT_EQ(mlp.total_bytes(),
            mlp.weights_bytes + mlp.gradients_bytes + mlp.optimizer_bytes + mlp.activations_bytes);
}

// The repository's examples (examples/*.yaml, as JSON), each well within its machine.
TEST(JobMemoryTest, TheExamplesFitEasily) {
  const std::string cosine = R"("schedule": {"cosine": {}}, "seed": 1)";
  const std::vector<std::tuple<std::string, std::string, int64_t>> examples = {
      {"fashion-mlp",
       MlpJson(R"("sizes": [784, 512, 256, 10])",
               R"("optimizer": {"adamw": {"lr": 0.001}}, "batch_size": 64, )" + cosine),
       kGiB / 8},
      {"fashion-cnn",
       CnnJson(R"("channels1": 32, "channels2": 64, "hidden": 128, "dropout": 0.25)",
               R"("optimizer": {"adamw": {"lr": 0.002}}, "batch_size": 64, )" + cosine),
       kGiB / 4},
      {"kjv-gpt",
       GptJson(R"("context": 128, "n_layer": 4, "n_head": 4, "n_embd": 256, "dropout": 0.1)",
               R"("optimizer": {"adamw": {"lr": 0.001}}, "grad_clip_norm": 1.0,
                  "batch_size": 16, "eval": {"every_steps": 100, "max_batches": 20})"),
       kGiB},
      // On a GPU (80 GB): bf16, and in training, attention with dropout keeps (B, nh, T, T)
      // tensors in three dtypes in each layer: about 16 of its 24 GiB.
      {"kjv-gpt-gpu",
       GptJson(R"("context": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768, "dropout": 0.1)",
               R"("device": "cuda", "precision": "bf16", "optimizer": {"adamw": {}},
                  "grad_clip_norm": 1.0, "batch_size": 16)"),
       32 * kGiB},
  };
  for (const auto& [name, json, bound] : examples) {
    const MemoryEstimate e = EstimateRankMemory(ParseSpec(json), 256);
    std::printf("  %-12s %s\n", name.c_str(), e.Describe().c_str());
    EXPECT_LT(e.total_bytes(), bound) << name << ": " << e.Describe();
    EXPECT_GT(e.activations_bytes, 0) << name;
  }
}

// At the spec's maxima nothing overflows: every count is positive, and a count beyond int64
// saturates at its maximum instead of wrapping.
TEST(JobMemoryTest, TheSpecsMaximaSaturateInsteadOfOverflowing) {
  const std::string big = R"("optimizer": {"adamw": {}}, "batch_size": 1048576,
      "eval": {"batch_size": 1048576}, "precision": "bf16",
      "parallelism": {"world_size": 4096, "zero_stage": 1, "grad_compression": "bf16",
                      "bucket_size_mb": 1024, "first_bucket_size_mb": 1024})";
  const std::vector<std::string> specs = {
      MlpJson(R"("sizes": [1048576, 1048576, 1048576, 1048576], "dropout": 0.5)", big),
      CnnJson(R"("channels1": 4096, "channels2": 4096, "hidden": 1048576)", big),  // 28x28
      ResNetJson(R"("base_width": 4096, "blocks": [64, 64, 64, 64])", big),
      GptJson(R"("vocab_size": 65536, "context": 65536, "n_layer": 1024, "n_head": 1,
                 "n_embd": 65536, "dropout": 0.5)",
              big),
      GptJson(R"("vocab_size": 65536, "context": 65536, "n_layer": 1024, "n_head": 1024,
                 "n_embd": 65536, "dropout": 0.5)",
              big + R"(, "device": "cuda")"),
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i <= specs.size(); ++i) {
    // Last, a CNN past what any data gives it (4096 channels of 4096 x 4096 pixels).
    JobSpec spec = ParseSpec(specs[i < specs.size() ? i : 1]);
    if (i == specs.size()) spec.model.cnn.in_channels = spec.model.cnn.image_size = 4096;
    SCOPED_TRACE(ToJson(spec).Dump());
    const MemoryEstimate e = EstimateRankMemory(spec, 65536);
    EXPECT_GT(e.parameters, 0);
    for (int64_t bytes : {e.weights_bytes, e.gradients_bytes, e.optimizer_bytes,
                          e.activations_bytes, e.total_bytes()}) {
      EXPECT_GT(bytes, 0);
    }
    EXPECT_GE(e.total_bytes(), e.activations_bytes);
    EXPECT_GT(e.total_bytes(), 1000 * kGiB);
    EXPECT_FALSE(e.Describe().empty());
  }
  // 2^20 sequences x 1024 heads x 65536^2 attention scores, each several bytes: past int64.
  const MemoryEstimate gpt = EstimateRankMemory(ParseSpec(specs[4]), 65536);
  EXPECT_EQ(gpt.activations_bytes, kMax);
  EXPECT_EQ(gpt.total_bytes(), kMax);
  EXPECT_NE(gpt.Describe().find("more than 8 EiB"), std::string::npos) << gpt.Describe();
}

TEST(JobMemoryTest, DescribeNamesEachPartWithItsUnit) {
  MemoryEstimate e;
  e.weights_bytes = 20 * kGiB;
  e.gradients_bytes = 20 * kGiB;
  e.optimizer_bytes = 40 * kGiB;
  e.activations_bytes = kGiB + kGiB / 5;
  e.optimizer = "adamw";
  e.batch = "batch 32 x context 128";
  EXPECT_EQ(e.Describe(),
            "about 81.2 GiB per rank: weights 20.0 GiB, gradients 20.0 GiB, optimizer state "
            "40.0 GiB (adamw), activations 1.2 GiB (batch 32 x context 128)");
  EXPECT_EQ(FormatBytes(512), "512 bytes");
  EXPECT_EQ(FormatBytes(3 << 20), "3.0 MiB");
  const JobSpec spec =
      ParseSpec(MlpJson(R"("sizes": [784, 10])", R"("optimizer": {"sgd": {"momentum": 0.9}})"));
  const MemoryEstimate mlp = EstimateRankMemory(spec, 0);
  EXPECT_EQ(mlp.parameters, 7850);
  EXPECT_NE(mlp.Describe().find("(sgd with momentum)"), std::string::npos) << mlp.Describe();
  EXPECT_NE(mlp.Describe().find("(batch 32)"), std::string::npos) << mlp.Describe();
}

}  // namespace
}  // namespace trainyard::spec
