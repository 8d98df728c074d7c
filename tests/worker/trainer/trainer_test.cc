#include "worker/trainer/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>

#include "kernels/cpu/parallel.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/data/vocabulary.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/safetensors.h"

namespace trainyard::trainer {
namespace {

using ::trainyard::trainer::testing::ParseSpec;

using ::testing::HasSubstr;
using testing::TempDir;
namespace fs = std::filesystem;

// Four well-separated classes in 2-D, `rows` rows "x,y,label", in a fixed pseudo-random order.
std::string BlobsCsv(int rows) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 0.3);
  const double centres[4][2] = {{2, 2}, {-2, 2}, {-2, -2}, {2, -2}};
  std::ostringstream out;
  for (int i = 0; i < rows; ++i) {
    const int c = static_cast<int>(rng() % 4);
    out << centres[c][0] + noise(rng) << "," << centres[c][1] + noise(rng) << "," << c << "\n";
  }
  return out.str();
}

std::string SmallText() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "In the beginning God created the heaven and the earth. ";
  return text;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernels::cpu::SetNumThreads(2);
    csv_ = dir_.path() + "/blobs.csv";
    testing::WriteRaw(csv_, BlobsCsv(240));
    text_ = dir_.path() + "/corpus.txt";
    testing::WriteRaw(text_, SmallText());
  }

  // An MLP on the CSV: 240 rows, 24 held out, batch 16 -> 14 steps per epoch.
  spec::JobSpec MlpSpec(const std::string& extra = "") {
    return ParseSpec(R"({"model": {"mlp": {"sizes": [2, 16, 4], "dropout": 0.2}},
      "data": {"csv": {"path": ")" +
                     csv_ + R"(", "eval_fraction": 0.1}, "num_workers": 2},
      "optimizer": {"sgd": {"lr": 0.1, "momentum": 0.9}}, "batch_size": 16, "seed": 5)" +
                     extra + "}");
  }

  // A tiny GPT on the text, with dropout, AdamW and a cosine schedule.
  spec::JobSpec GptSpec(const std::string& extra = "") {
    return ParseSpec(R"({"model": {"gpt": {"context": 16, "n_layer": 1, "n_head": 2,
                                            "n_embd": 16, "dropout": 0.1}},
      "data": {"text": {"path": ")" +
                     text_ + R"("}},
      "optimizer": {"adamw": {"lr": 0.01}}, "schedule": {"cosine": {"warmup_steps": 3}},
      "grad_clip_norm": 1.0, "batch_size": 4, "steps": 12, "seed": 3,
      "eval": {"max_batches": 2})" +
                     extra + "}");
  }

  TempDir dir_;
  std::string csv_, text_;
};

// Runs `spec` to its end (or until stopped after step `stop_at`) and returns every step's loss.
std::vector<double> Losses(const spec::JobSpec& spec, int64_t stop_at = -1,
                           TrainSummary* summary = nullptr) {
  std::vector<double> losses;
  std::atomic<bool> stop{false};
  TrainerOptions options;
  options.stop = &stop;
  options.on_step = [&](const StepMetrics& m) {
    losses.push_back(m.loss);
    if (m.step == stop_at) stop = true;
  };
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  StatusOr<TrainSummary> result = (*trainer)->Run();
  EXPECT_TRUE(result.ok()) << result.status();
  if (summary != nullptr && result.ok()) *summary = *result;
  return losses;
}

TEST_F(TrainerTest, TrainsAnMlpOnCsvAndEvaluatesOnTheHeldOutRows) {
  std::vector<StepMetrics> steps;
  std::vector<EvalMetrics> evals;
  TrainerOptions options;
  options.on_step = [&](const StepMetrics& m) { steps.push_back(m); };
  options.on_eval = [&](const EvalMetrics& m) { evals.push_back(m); };
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(MlpSpec(R"(, "epochs": 3, "eval": {"every_steps": 14})"), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->steps_per_epoch(), 14);  // ceil(216 / 16)
  StatusOr<TrainSummary> summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();

  ASSERT_EQ(steps.size(), 42u);
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepMetrics& m = steps[i];
    EXPECT_EQ(m.step, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(m.total_steps, 42);
    EXPECT_EQ(m.epoch, static_cast<int64_t>(i) / 14);
    EXPECT_EQ(m.samples, i % 14 == 13 ? 216 - 13 * 16 : 16);  // the last batch of an epoch
    EXPECT_EQ(m.tokens, m.samples);
    EXPECT_DOUBLE_EQ(m.lr, 0.1);
    EXPECT_TRUE(std::isnan(m.grad_norm));  // no clipping asked for
    EXPECT_GT(m.samples_per_second, 0);
    EXPECT_GT(m.data_seconds, 0);  // even a ready batch takes the loader's hand-over
    EXPECT_GT(m.forward_seconds, 0);
    EXPECT_GT(m.backward_seconds, 0);
    EXPECT_GT(m.optimizer_seconds, 0);
  }
  EXPECT_LT(steps.back().loss, steps.front().loss / 4);
  // Evaluations at steps 14 and 28 and at the end, each over all 24 held-out rows.
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_EQ(evals[0].step, 14);
  EXPECT_EQ(evals[2].step, 42);
  EXPECT_EQ(evals[2].samples, 24);
  EXPECT_GE(evals[2].accuracy, 0.95);
  EXPECT_EQ(summary->steps, 42);
  EXPECT_EQ(summary->steps_this_run, 42);
  ASSERT_TRUE(summary->eval.has_value());
  EXPECT_EQ(summary->eval->accuracy, evals[2].accuracy);
  EXPECT_LT(summary->final_train_loss, steps.front().loss);
  EXPECT_EQ(summary->checkpoint, "");  // no checkpoint.dir
  EXPECT_FALSE(summary->interrupted);
}

TEST_F(TrainerTest, EachStepReportsTheTensorMemoryPeakSinceTheStepBefore) {
  constexpr int64_t kBig = int64_t{64} << 20;
  { Tensor big = Empty({kBig / 4}, Options(DType::kFloat32)); }  // freed before the run
  std::vector<StepMetrics> steps;
  TrainerOptions options;
  options.on_step = [&](const StepMetrics& m) { steps.push_back(m); };
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(MlpSpec(R"(, "steps": 4)"), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ(steps.size(), 4u);
  for (const StepMetrics& m : steps) {
    EXPECT_GT(m.memory.allocated_bytes, 0) << "step " << m.step;  // the model at least
    EXPECT_GE(m.memory.peak_allocated_bytes, m.memory.allocated_bytes) << "step " << m.step;
    EXPECT_LT(m.memory.peak_allocated_bytes, kBig)
        << "step " << m.step << ": the peak is the run's own";
    EXPECT_GE(m.memory.reserved_bytes, kBig) << "the CPU allocator keeps the freed block";
  }
}

TEST_F(TrainerTest, GptMetricsCountTokensAndFollowTheSchedule) {
  std::vector<StepMetrics> steps;
  TrainerOptions options;
  options.on_step = [&](const StepMetrics& m) { steps.push_back(m); };
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(GptSpec(), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const JobData& data = (*trainer)->data();
  ASSERT_TRUE(data.vocabulary.has_value());
  EXPECT_EQ(data.num_classes, data.vocabulary->size());
  ASSERT_TRUE((*trainer)->Run().ok());
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_EQ(steps[0].tokens, 4 * 16);
  EXPECT_DOUBLE_EQ(steps[0].lr, 0.01 / 4);       // warm-up: lr * (step + 1) / (warmup + 1)
  EXPECT_DOUBLE_EQ(steps[3].lr, 0.01);           // the peak after 3 warm-up steps
  EXPECT_LT(steps[11].lr, steps[6].lr);          // then the cosine decays
  EXPECT_FALSE(std::isnan(steps[5].grad_norm));  // clipping measures the norm
}

// Note [Exact resume]: stopping after step k and resuming gives the same losses, bit for bit.
void ExpectExactResume(const spec::JobSpec& base, const std::string& ckpt_dir, int64_t stop_at) {
  spec::JobSpec plain = base;
  const std::vector<double> straight = Losses(plain);

  spec::JobSpec saved = base;
  saved.checkpoint.dir = ckpt_dir;
  TrainSummary first;
  std::vector<double> before = Losses(saved, stop_at, &first);
  EXPECT_TRUE(first.interrupted);
  EXPECT_EQ(first.steps, stop_at);
  EXPECT_EQ(first.checkpoint, ckpt_dir + "/" + StepDirName(stop_at));
  ASSERT_EQ(before.size(), static_cast<size_t>(stop_at));

  TrainSummary second;
  std::vector<double> after = Losses(saved, -1, &second);
  EXPECT_EQ(second.resumed_from, ckpt_dir + "/" + StepDirName(stop_at));
  EXPECT_EQ(second.steps_this_run, static_cast<int64_t>(straight.size()) - stop_at);
  before.insert(before.end(), after.begin(), after.end());
  ASSERT_EQ(before.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_EQ(before[i], straight[i]) << "step " << i + 1 << " (resumed after " << stop_at << ")";
  }
}

TEST_F(TrainerTest, ResumesAnMlpExactlyAcrossAnEpochBoundary) {
  // Stopped mid-epoch 1 of 3, with shuffling, dropout and two loader threads.
  ExpectExactResume(MlpSpec(R"(, "epochs": 3)"), dir_.path() + "/mlp-run", 19);
}

TEST_F(TrainerTest, ResumesAGptExactly) {
  // Dropout, AdamW state, the cosine schedule and clipping all carry over.
  ExpectExactResume(GptSpec(), dir_.path() + "/gpt-run", 5);
  // The vocabulary is kept beside the checkpoints.
  StatusOr<data::Vocabulary> vocabulary =
      data::Vocabulary::Load(dir_.path() + "/gpt-run/" + kVocabularyFile);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  StatusOr<data::Vocabulary> expected = data::Vocabulary::FromText(SmallText());
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(*vocabulary, *expected);
}

TEST_F(TrainerTest, ChecksTheDataAgainstTheSavedVocabulary) {
  spec::JobSpec spec = GptSpec();
  spec.steps = 5;
  spec.checkpoint.dir = dir_.path() + "/run";
  ASSERT_EQ(Losses(spec).size(), 5u);
  testing::WriteRaw(text_, SmallText() + "Zebra!");  // 'Z' and '!' are new characters
  spec.steps = 8;
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("does not fit the vocabulary saved beside the checkpoints"));
}

TEST_F(TrainerTest, SavesEveryNStepsKeepsTheLastAndFinishesWithACheckpoint) {
  spec::JobSpec spec = MlpSpec(R"(, "steps": 20)");
  spec.checkpoint = {dir_.path() + "/ckpt", /*every_steps=*/6, /*keep_last=*/2, true, "", ""};
  std::vector<int64_t> saved;
  TrainerOptions options;
  options.on_checkpoint = [&](const std::string&, int64_t step) { saved.push_back(step); };
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  StatusOr<TrainSummary> summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(saved, (std::vector<int64_t>{6, 12, 18, 20}));
  EXPECT_EQ(summary->checkpoint, spec.checkpoint.dir + "/" + StepDirName(20));
  std::vector<std::string> dirs;
  for (const auto& entry : fs::directory_iterator(spec.checkpoint.dir)) {
    dirs.push_back(entry.path().filename().string());
  }
  std::sort(dirs.begin(), dirs.end());
  EXPECT_EQ(dirs, (std::vector<std::string>{kMetricsFile, StepDirName(18), StepDirName(20)}));

  // Running the finished job again trains nothing and reports the same checkpoint.
  TrainSummary again;
  EXPECT_TRUE(Losses(spec, -1, &again).empty());
  EXPECT_EQ(again.steps, 20);
  EXPECT_EQ(again.resumed_from, summary->checkpoint);
}

TEST_F(TrainerTest, StartsFromInitFromWeights) {
  spec::JobSpec first = MlpSpec(R"(, "steps": 5)");
  first.checkpoint.dir = dir_.path() + "/a";
  ASSERT_EQ(Losses(first).size(), 5u);
  const std::string weights = first.checkpoint.dir + "/" + StepDirName(5) + "/model.safetensors";

  spec::JobSpec second = MlpSpec(R"(, "steps": 1)");
  second.seed = 99;
  second.checkpoint.init_from = weights;
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(second);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  StatusOr<SafetensorsFile> file = LoadSafetensors(weights);
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, Tensor> saved(file->tensors.begin(), file->tensors.end());
  const nn::NamedTensors state = (*trainer)->model().StateDict();
  ASSERT_EQ(state.size(), saved.size());
  for (const auto& [name, tensor] : state) {
    ASSERT_TRUE(saved.count(name)) << name;
    EXPECT_TRUE(testing::BitwiseEqual(tensor, saved.at(name))) << name;
  }

  second.checkpoint.init_from = dir_.path() + "/missing.safetensors";
  StatusOr<std::unique_ptr<Trainer>> missing = Trainer::Create(second);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("checkpoint.init_from"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("missing.safetensors"));
}

TEST_F(TrainerTest, ErrorsNameTheSpecFieldAndTheFile) {
  spec::JobSpec spec = MlpSpec();
  spec.data.csv.path = dir_.path() + "/nope.csv";
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()), HasSubstr("data.csv.path"));
  EXPECT_THAT(std::string(trainer.status().message()), HasSubstr("nope.csv"));

  spec = MlpSpec();
  spec.model.mlp.sizes = {3, 16, 4};
  trainer = Trainer::Create(spec);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("model.mlp.sizes[0] = 3: must be 2, the feature columns of"));

  spec = MlpSpec();
  spec.model.mlp.sizes = {2, 16, 3};  // labels go up to 3
  trainer = Trainer::Create(spec);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("outside the model's classes [0, 3)"));

  spec = GptSpec();
  spec.model.gpt.vocab_size = 5;
  trainer = Trainer::Create(spec);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("model.gpt.vocab_size = 5: smaller than the data's vocabulary"));

  spec = GptSpec();
  spec.model.gpt.context = 4096;  // longer than the text
  trainer = Trainer::Create(spec);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()), HasSubstr("model.gpt.context = 4096"));
}

TEST_F(TrainerTest, ADivergingRunStopsWithAClearError) {
  spec::JobSpec spec = MlpSpec(R"(, "steps": 30)");
  spec.optimizer.sgd.lr = 1e30;
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  StatusOr<TrainSummary> summary = (*trainer)->Run();
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("training diverged"));
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("at step"));
}

// --- Mixed precision (Note [Mixed precision] in trainer.h) -----------------------------------

// Runs `spec` with `options` to its end (or until stopped after step `stop_at`) and returns
// every step's metrics.
std::vector<StepMetrics> Steps(const spec::JobSpec& spec, TrainerOptions options = {},
                               int64_t stop_at = -1, TrainSummary* summary = nullptr) {
  std::vector<StepMetrics> steps;
  std::atomic<bool> stop{false};
  options.stop = &stop;
  options.on_step = [&](const StepMetrics& m) {
    steps.push_back(m);
    if (m.step == stop_at) stop = true;
  };
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  StatusOr<TrainSummary> result = (*trainer)->Run();
  EXPECT_TRUE(result.ok()) << result.status();
  if (summary != nullptr && result.ok()) *summary = *result;
  return steps;
}

nn::NamedTensors Snapshot(nn::Module& model) {
  nn::NamedTensors out;
  for (const auto& [name, t] : model.StateDict()) {
    out.emplace_back(name, ConvertTo(t, t.dtype(), /*force_copy=*/true));
  }
  return out;
}

bool SameWeights(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !testing::BitwiseEqual(a[i].second, b[i].second)) return false;
  }
  return true;
}

TEST_F(TrainerTest, Bf16AndFp16RunsTrainAnMlpAndOnlyFp16ScalesTheLoss) {
  for (const std::string precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    TrainSummary summary;
    std::vector<StepMetrics> steps =
        Steps(MlpSpec(R"(, "epochs": 3, "precision": ")" + precision + "\""), {}, -1, &summary);
    ASSERT_EQ(steps.size(), 42u);
    EXPECT_LT(steps.back().loss, steps.front().loss / 4);
    for (const StepMetrics& m : steps) {
      EXPECT_EQ(m.loss_scale, precision == "fp16" ? 65536.0 : 0.0) << "step " << m.step;
      EXPECT_FALSE(m.skipped) << "step " << m.step;
    }
    EXPECT_EQ(summary.skipped_steps, 0);
    ASSERT_TRUE(summary.eval.has_value());
    EXPECT_GE(summary.eval->accuracy, 0.95);
  }
}

TEST_F(TrainerTest, Fp16SkipsAStepWhoseGradientsOverflowThenBacksOffAndTrains) {
  // 2^128 overflows float32: the first scaled loss, and so every gradient, is inf. Each skip
  // divides the scale by 2^16, so it soon fits float16 (where autocast's matmul gradients pass).
  TrainerOptions options;
  options.grad_scaler.init_scale = std::ldexp(1.0, 128);
  options.grad_scaler.backoff_factor = std::ldexp(1.0, -16);
  spec::JobSpec spec = MlpSpec(R"(, "steps": 42, "precision": "fp16")");
  std::vector<StepMetrics> steps;
  bool unchanged_after_first = false;
  nn::NamedTensors initial;
  Trainer* raw = nullptr;
  options.on_step = [&](const StepMetrics& m) {
    steps.push_back(m);
    if (m.step == 1) unchanged_after_first = SameWeights(Snapshot(raw->model()), initial);
  };
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  raw = trainer->get();
  initial = Snapshot(raw->model());
  StatusOr<TrainSummary> summary = raw->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();

  ASSERT_EQ(steps.size(), 42u);
  EXPECT_TRUE(steps[0].skipped);
  EXPECT_EQ(steps[0].loss_scale, std::ldexp(1.0, 128));
  EXPECT_TRUE(unchanged_after_first) << "a skipped step must not change the weights";
  EXPECT_TRUE(std::isfinite(steps[0].loss)) << "the reported loss is the unscaled one";
  EXPECT_EQ(steps[1].loss_scale, std::ldexp(1.0, 112)) << "a skip multiplies by backoff_factor";
  int64_t skipped = 0;
  for (const StepMetrics& m : steps) skipped += m.skipped;
  EXPECT_EQ(summary->skipped_steps, skipped);
  EXPECT_LT(skipped, 10) << "the scale must come down to one that fits";
  EXPECT_FALSE(steps.back().skipped);
  EXPECT_LT(steps.back().loss, steps.front().loss / 2);
}

TEST_F(TrainerTest, Fp16ClipsTheUnscaledGradients) {
  spec::JobSpec fp32 = MlpSpec(R"(, "steps": 3, "grad_clip_norm": 1000.0)");
  spec::JobSpec fp16 = fp32;
  fp16.precision = "fp16";
  std::vector<StepMetrics> a = Steps(fp32);
  std::vector<StepMetrics> b = Steps(fp16);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  // Scaled gradients would have a norm 65536 times larger; fp16 rounding moves it a little.
  EXPECT_NEAR(b[0].grad_norm, a[0].grad_norm, 1e-2 * a[0].grad_norm);
}

TEST_F(TrainerTest, Fp16ResumesItsLossScaleExactly) {
  TrainerOptions options;
  options.grad_scaler.growth_interval = 4;  // the scale doubles every 4 steps
  spec::JobSpec spec = MlpSpec(R"(, "steps": 20, "precision": "fp16")");
  const std::vector<StepMetrics> straight = Steps(spec, options);
  ASSERT_EQ(straight.size(), 20u);
  EXPECT_GT(straight[10].loss_scale, 65536.0) << "the test needs a scale that moved";

  spec.checkpoint.dir = dir_.path() + "/fp16-run";
  std::vector<StepMetrics> resumed = Steps(spec, options, /*stop_at=*/10);
  ASSERT_EQ(resumed.size(), 10u);
  StatusOr<SafetensorsFile> file =
      LoadSafetensors(spec.checkpoint.dir + "/" + StepDirName(10) + "/" + kOptimizerFile);
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, Tensor> saved(file->tensors.begin(), file->tensors.end());
  ASSERT_TRUE(saved.count("grad_scaler.scale"));
  EXPECT_EQ(saved.at("grad_scaler.scale").item(), straight[10].loss_scale);  // step 11's
  ASSERT_TRUE(saved.count("grad_scaler.growth_tracker"));
  EXPECT_LT(saved.at("grad_scaler.growth_tracker").item(), 4);

  TrainSummary second;
  std::vector<StepMetrics> after = Steps(spec, options, -1, &second);
  EXPECT_EQ(second.resumed_from, spec.checkpoint.dir + "/" + StepDirName(10));
  resumed.insert(resumed.end(), after.begin(), after.end());
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_EQ(resumed[i].loss_scale, straight[i].loss_scale) << "step " << i + 1;
    EXPECT_EQ(resumed[i].loss, straight[i].loss) << "step " << i + 1;
  }

  // An fp32 run resumes the same checkpoint, leaving the scaler's entries aside.
  spec.precision = "fp32";
  spec.steps = 22;
  std::vector<StepMetrics> fp32 = Steps(spec);
  ASSERT_EQ(fp32.size(), 2u);
  EXPECT_EQ(fp32[0].loss_scale, 0.0);
}

TEST_F(TrainerTest, ABadGradScalerSettingOrACudaDeviceWithoutAGpuIsRefusedAtCreate) {
  TrainerOptions options;
  options.grad_scaler.growth_factor = 0.5;
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(MlpSpec(R"(, "precision": "fp16")"), options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()), HasSubstr("grad_scaler: growth_factor"));
  EXPECT_TRUE(Trainer::Create(MlpSpec(R"(, "precision": "bf16")"), options).ok())
      << "bf16 uses no scaler";

  StatusOr<cuda::Backend*> backend = LoadCudaBackend();
  if (backend.ok() && (*backend)->DeviceCount() > 0) return;  // a GPU here: cuda is allowed
  // No CUDA library (Unimplemented) or no GPU (FailedPrecondition): refused, naming the field.
  trainer = Trainer::Create(MlpSpec(R"(, "device": "cuda")"));
  ASSERT_FALSE(trainer.ok());
  EXPECT_TRUE(trainer.status().code() == StatusCode::kUnimplemented ||
              trainer.status().code() == StatusCode::kFailedPrecondition)
      << trainer.status();
  EXPECT_THAT(std::string(trainer.status().message()), HasSubstr("device = \"cuda\""));
}

// The ops follow Note [Autocast policy] (worker/autograd/autocast.h): a bf16 forward rounds the
// matrix products' inputs, so its loss is near fp32's but not the same bits.
TEST_F(TrainerTest, Bf16ForwardRoundsTheMatrixProducts) {
  spec::JobSpec fp32 = MlpSpec(R"(, "steps": 1)");
  spec::JobSpec bf16 = fp32;
  bf16.precision = "bf16";
  const double a = Steps(fp32).at(0).loss;
  const double b = Steps(bf16).at(0).loss;
  EXPECT_NE(a, b);
  EXPECT_NEAR(a, b, 1e-2 * a);
}

}  // namespace
}  // namespace trainyard::trainer
