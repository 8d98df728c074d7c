#include "worker/trainer/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/nn/gpt.h"
#include "worker/nn/mlp.h"
#include "worker/ops/loss.h"
#include "worker/optim/adam.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/safetensors.h"

namespace trainyard::trainer {
namespace {

namespace fs = std::filesystem;
using testing::BitwiseEqual;
using testing::Entries;
using ::testing::HasSubstr;
using testing::TempDir;

nn::MlpConfig SmallMlp(int64_t classes = 3) {
  nn::MlpConfig config;
  config.sizes = {6, 16, classes};
  config.activation = "gelu";
  return config;
}

nn::GptConfig SmallGpt() {
  nn::GptConfig config;
  config.vocab_size = 11;
  config.context = 8;
  config.n_layer = 1;
  config.n_head = 2;
  config.n_embd = 8;
  return config;
}

// The specs also tell tests/golden/check_checkpoint_in_torch.py which torch model to build.
Json MlpSpec() {
  return Json::Object(
      {{"model", "mlp"},
       {"mlp", Json::Object({{"sizes", Json::Array({6, 16, 3})}, {"activation", "gelu"}})}});
}

Json GptSpec() {
  const nn::GptConfig c = SmallGpt();
  return Json::Object({{"model", "gpt"},
                       {"gpt", Json::Object({{"vocab_size", c.vocab_size},
                                             {"context", c.context},
                                             {"n_layer", c.n_layer},
                                             {"n_head", c.n_head},
                                             {"n_embd", c.n_embd},
                                             {"bias", c.bias}})}});
}

CheckpointState StateAt(int64_t step, Json spec = MlpSpec()) {
  CheckpointState state;
  state.step = step;
  state.epoch = 2;
  state.position = 48;
  state.default_generator = {7, 123};
  state.generators["dropout"] = {std::numeric_limits<uint64_t>::max(), 5};
  state.spec = std::move(spec);
  return state;
}

// An MLP, its generator (which must outlive it) and AdamW over its parameters.
struct MlpRun {
  explicit MlpRun(uint64_t seed, int64_t classes = 3) : gen(seed), model(SmallMlp(classes), &gen) {
    optim::AdamWOptions options;
    options.lr = 0.01;
    options.weight_decay = 0.1;
    optimizer = std::move(optim::AdamW::Create(model.NamedParameters(), options)).value();
  }
  // One training step on batch t (drawn from a generator seeded by t); returns the loss.
  double Step(int t) {
    Generator data(1000 + t);
    Tensor x = Randn({8, 6}, {}, &data);
    Tensor y = RandInt({8}, 0, 3, Options(DType::kInt64), &data);
    optimizer->ZeroGrad();
    Tensor loss = ops::CrossEntropy(model.Forward(x), y);
    EXPECT_TRUE(autograd::Backward(loss).ok());
    optimizer->Step();
    return loss.item();
  }

  Generator gen;
  nn::Mlp model;
  std::unique_ptr<optim::AdamW> optimizer;
};

nn::NamedTensors Snapshot(const nn::NamedTensors& tensors) {
  nn::NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, ConvertTo(t, t.dtype(), true));
  return out;
}

void ExpectBitwiseEqual(const nn::NamedTensors& actual, const nn::NamedTensors& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].first, expected[i].first);
    EXPECT_TRUE(BitwiseEqual(actual[i].second, expected[i].second)) << expected[i].first;
  }
}

Tensor Find(const nn::NamedTensors& tensors, const std::string& name) {
  for (const auto& [key, t] : tensors) {
    if (key == name) return t;
  }
  ADD_FAILURE() << name << " not found";
  return Tensor();
}

// With TY_KEEP_CHECKPOINT=<dir>, copies the checkpoint to <dir>/<name>/ beside io.safetensors
// (an input and the model's output) for tests/golden/check_checkpoint_in_torch.py.
void KeepForTorch(const std::string& name, const std::string& step_dir, nn::Module& model,
                  const Tensor& x) {
  const char* keep = std::getenv("TY_KEEP_CHECKPOINT");
  if (keep == nullptr || *keep == '\0') return;
  const fs::path out = fs::path(keep) / name;
  fs::remove_all(out);
  fs::create_directories(out);
  fs::copy(step_dir, out / fs::path(step_dir).filename(), fs::copy_options::recursive);
  autograd::NoGradGuard no_grad;
  Tensor y = model.Forward(x);
  ASSERT_TRUE(SaveSafetensors((out / "io.safetensors").string(), {{"x", x}, {"out", y}}).ok());
}

TEST(CheckpointTest, MlpAndAdamWRoundTripBitForBitAndResumedTrainingMatchesTheUninterrupted) {
  TempDir tmp;
  FakeClock clock(1.7e9 + 0.25);
  CheckpointManager manager(tmp.File("run"), 0, &clock);
  MlpRun a(1);
  for (int t = 0; t < 3; ++t) a.Step(t);
  ASSERT_TRUE(manager.Save(a.model, a.optimizer.get(), StateAt(3)).ok());
  const nn::NamedTensors weights = Snapshot(a.model.StateDict());
  const nn::NamedTensors optimizer_state = a.optimizer->StateDict();
  std::vector<double> uninterrupted;
  for (int t = 3; t < 6; ++t) uninterrupted.push_back(a.Step(t));

  MlpRun b(2);
  ASSERT_FALSE(BitwiseEqual(b.model.StateDict()[0].second, weights[0].second));
  const std::string step_dir = tmp.File("run/step-00000003");
  StatusOr<CheckpointState> state = LoadCheckpoint(step_dir, &b.model, b.optimizer.get());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->step, 3);
  EXPECT_EQ(state->saved_at, 1.7e9 + 0.25);
  ExpectBitwiseEqual(b.model.StateDict(), weights);
  ExpectBitwiseEqual(b.optimizer->StateDict(), optimizer_state);
  Generator input_gen(5);
  KeepForTorch("mlp", step_dir, b.model, Randn({4, 6}, {}, &input_gen));
  for (int t = 3; t < 6; ++t) EXPECT_EQ(b.Step(t), uninterrupted[t - 3]) << "step " << t;
}

TEST(CheckpointTest, ManifestStateRoundTripsThroughSaveAndLoad) {
  TempDir tmp;
  FakeClock clock(1234.5);
  CheckpointManager manager(tmp.path(), 0, &clock);
  MlpRun a(1);
  CheckpointState saved = StateAt(40);
  saved.saved_at = 99;  // ignored: Save stamps its clock's time
  ASSERT_TRUE(manager.Save(a.model, nullptr, saved).ok());

  MlpRun b(2);
  StatusOr<CheckpointState> loaded = LoadCheckpoint(tmp.File("step-00000040"), &b.model, nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 40);
  EXPECT_EQ(loaded->epoch, 2);
  EXPECT_EQ(loaded->position, 48);
  EXPECT_EQ(loaded->world_size, 1);
  EXPECT_EQ(loaded->default_generator, (GeneratorState{7, 123}));
  EXPECT_EQ(loaded->generators, saved.generators);
  EXPECT_EQ(loaded->spec, MlpSpec());
  EXPECT_EQ(loaded->saved_at, 1234.5);
}

TEST(CheckpointTest, GptTiedEmbeddingIsStoredOnceAndLoadsBackTied) {
  TempDir tmp;
  Generator gen_a(1), gen_b(2);
  nn::Gpt a(SmallGpt(), &gen_a);
  CheckpointManager manager(tmp.path(), 0);
  ASSERT_TRUE(manager.Save(a, nullptr, StateAt(1, GptSpec())).ok());
  const std::string step_dir = tmp.File("step-00000001");

  StatusOr<SafetensorsFile> file = LoadSafetensors(step_dir + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.size(), a.StateDict().size() - 1);
  std::vector<std::string> names;
  for (const auto& [name, t] : file->tensors) names.push_back(name);
  EXPECT_THAT(names, ::testing::Contains("transformer.wte.weight"));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("lm_head.weight")));

  nn::Gpt b(SmallGpt(), &gen_b);
  StatusOr<CheckpointState> state = LoadCheckpoint(step_dir, &b, nullptr);
  ASSERT_TRUE(state.ok()) << state.status();
  Tensor wte = Find(b.StateDict(), "transformer.wte.weight");
  Tensor head = Find(b.StateDict(), "lm_head.weight");
  EXPECT_TRUE(BitwiseEqual(head, Find(a.StateDict(), "transformer.wte.weight")));
  {
    autograd::NoGradGuard no_grad;
    FillInPlace(wte, 0.25);
  }
  for (float v : ToVector<float>(head)) ASSERT_EQ(v, 0.25f);
  Generator input_gen(5);
  KeepForTorch("gpt", step_dir, a, RandInt({2, 6}, 0, 11, Options(DType::kInt64), &input_gen));
}

TEST(CheckpointTest, KeepLastDeletesOlderCheckpointsButNeverTheOneJustWritten) {
  TempDir tmp;
  MlpRun run(1);
  CheckpointManager manager(tmp.path(), 2);
  for (int64_t step : {1, 2, 3, 4})
    ASSERT_TRUE(manager.Save(run.model, nullptr, StateAt(step)).ok());
  EXPECT_EQ(Entries(tmp.path()), (std::vector<std::string>{"step-00000003", "step-00000004"}));
  // A run rolled back to an earlier step keeps what it just wrote beside the newest two.
  ASSERT_TRUE(manager.Save(run.model, nullptr, StateAt(2)).ok());
  EXPECT_EQ(Entries(tmp.path()),
            (std::vector<std::string>{"step-00000002", "step-00000003", "step-00000004"}));
}

TEST(CheckpointTest, KeepLastZeroKeepsEveryCheckpoint) {
  TempDir tmp;
  MlpRun run(1);
  CheckpointManager manager(tmp.path(), 0);
  for (int64_t step : {5, 10, 15})
    ASSERT_TRUE(manager.Save(run.model, nullptr, StateAt(step)).ok());
  EXPECT_EQ(Entries(tmp.path()).size(), 3u);
}

TEST(CheckpointTest, LatestIgnoresLeftoverTmpDirsAndStepDirsWithoutAValidManifest) {
  TempDir tmp;
  MlpRun run(1);
  CheckpointManager manager(tmp.path(), 0);
  ASSERT_TRUE(manager.Save(run.model, nullptr, StateAt(7)).ok());
  ASSERT_TRUE(manager.Save(run.model, nullptr, StateAt(8)).ok());
  ASSERT_TRUE(manager.Save(run.model, nullptr, StateAt(100000000)).ok());  // 9 digits
  testing::WriteRaw(tmp.File("step-100000000/manifest.json"), "{\"format\": ");
  fs::create_directory(tmp.File("step-00000009"));  // no manifest at all
  fs::copy(tmp.File("step-00000008"), tmp.File(".tmp-step-00000010-4242"));

  StatusOr<std::optional<std::string>> latest = manager.Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->value_or("none"), tmp.File("step-00000008"));
  // Once step 8 loses its weights, step 7 is the newest complete one.
  fs::remove(tmp.File("step-00000008/model.safetensors"));
  latest = manager.Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->value_or("none"), tmp.File("step-00000007"));
}

// Junk written over part of a weight file (its header intact, the size unchanged) or a cut
// file: the manifest's CRC-32 and size catch it, and the older good checkpoint is taken; with
// none left, the error names every bad one instead of starting from step 0.
TEST(CheckpointTest, LatestSkipsCheckpointsWhoseFilesFailTheirChecksum) {
  TempDir tmp;
  MlpRun run(1);
  CheckpointManager manager(tmp.path(), 0);
  ASSERT_TRUE(manager.Save(run.model, run.optimizer.get(), StateAt(7)).ok());
  ASSERT_TRUE(manager.Save(run.model, run.optimizer.get(), StateAt(8)).ok());
  StatusOr<Manifest> m = ReadManifest(tmp.File("step-00000008/manifest.json"));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->files.count(kModelFile), 1u);
  EXPECT_EQ(m->files.at(kModelFile).bytes,
            static_cast<int64_t>(fs::file_size(tmp.File("step-00000008/model.safetensors"))));

  std::string weights = testing::ReadRaw(tmp.File("step-00000008/model.safetensors"));
  for (size_t i = weights.size() * 3 / 4; i < weights.size(); ++i) weights[i] = '\x7f';
  testing::WriteRaw(tmp.File("step-00000008/model.safetensors"), weights);
  StatusOr<std::optional<std::string>> latest = manager.Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->value_or("none"), tmp.File("step-00000007"));

  const std::string optimizer = testing::ReadRaw(tmp.File("step-00000007/optimizer.safetensors"));
  testing::WriteRaw(tmp.File("step-00000007/optimizer.safetensors"),
                    optimizer.substr(0, optimizer.size() - 10));
  latest = manager.Latest();
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(latest.status().message(), HasSubstr("no usable checkpoint in"));
  EXPECT_THAT(latest.status().message(),
              HasSubstr(tmp.File("step-00000008/model.safetensors") + "\" is damaged"));
  EXPECT_THAT(latest.status().message(),
              HasSubstr(tmp.File("step-00000007/optimizer.safetensors") + "\" is damaged"));
}

TEST(CheckpointTest, LatestOfAMissingOrEmptyDirectoryIsNone) {
  TempDir tmp;
  StatusOr<std::optional<std::string>> latest = CheckpointManager(tmp.File("absent"), 3).Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
  latest = CheckpointManager(tmp.path(), 3).Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
}

TEST(CheckpointTest, SaveRemovesLeftoversOfACrashedSaveAndReplacesTheSameStep) {
  TempDir tmp;
  MlpRun a(1), b(2);
  CheckpointManager manager(tmp.path(), 0);
  fs::create_directory(tmp.File(".tmp-step-00000003-4242"));
  fs::create_directory(tmp.File(".trash-step-00000001-4242"));
  ASSERT_TRUE(manager.Save(a.model, nullptr, StateAt(3)).ok());
  ASSERT_TRUE(manager.Save(b.model, nullptr, StateAt(3)).ok());
  EXPECT_EQ(Entries(tmp.path()), std::vector<std::string>{"step-00000003"});
  MlpRun c(3);
  ASSERT_TRUE(InitFromWeights(tmp.File("step-00000003"), &c.model).ok());
  ExpectBitwiseEqual(c.model.StateDict(), b.model.StateDict());
}

// Two buffers that share memory, which safetensors refuses to store.
class AliasedBuffers : public nn::Module {
 public:
  AliasedBuffers() : Module("AliasedBuffers") {
    Tensor a = RegisterBuffer("a", Zeros({4}));
    RegisterBuffer("b", MakeView(a, {2}, {1}, 2));
  }
};

TEST(CheckpointTest, AFailedSaveLeavesNoStepDirectoryBehind) {
  TempDir tmp;
  CheckpointManager manager(tmp.path(), 0);
  Status s = manager.Save(AliasedBuffers(), nullptr, StateAt(5));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(tmp.File("step-00000005")));
  EXPECT_TRUE(Entries(tmp.path()).empty());
}

TEST(CheckpointTest, TruncatedModelFileGivesAnErrorNamingThePath) {
  TempDir tmp;
  MlpRun a(1), b(2);
  CheckpointManager manager(tmp.path(), 0);
  ASSERT_TRUE(manager.Save(a.model, a.optimizer.get(), StateAt(2)).ok());
  const std::string model_path = tmp.File("step-00000002/model.safetensors");
  fs::resize_file(model_path, fs::file_size(model_path) / 2);
  const nn::NamedTensors before = Snapshot(b.model.StateDict());

  StatusOr<CheckpointState> state =
      LoadCheckpoint(tmp.File("step-00000002"), &b.model, b.optimizer.get());
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(state.status().message(), HasSubstr(model_path));
  ExpectBitwiseEqual(b.model.StateDict(), before);
  EXPECT_EQ(b.optimizer->state(0).step, 0);  // the optimizer state was not restored either
}

TEST(CheckpointTest, LoadErrorsNameTheFileAndTheProblem) {
  TempDir tmp;
  MlpRun a(1);
  CheckpointManager manager(tmp.path(), 0);
  ASSERT_TRUE(manager.Save(a.model, nullptr, StateAt(1)).ok());
  const std::string dir = tmp.File("step-00000001");

  // Keys that do not match the model are listed.
  MlpRun wider(2, /*classes=*/4);
  StatusOr<CheckpointState> state = LoadCheckpoint(dir, &wider.model, nullptr);
  ASSERT_FALSE(state.ok());
  EXPECT_THAT(state.status().message(), HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(state.status().message(), HasSubstr("fc2.weight"));
  // An optimizer cannot be restored from a checkpoint saved without one.
  state = LoadCheckpoint(dir, &a.model, a.optimizer.get());
  EXPECT_EQ(state.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(state.status().message(), HasSubstr("no optimizer state"));
  // A newer format version.
  std::string manifest = testing::ReadRaw(dir + "/manifest.json");
  manifest.replace(manifest.find("\"version\": 1"), 12, "\"version\": 2");
  testing::WriteRaw(dir + "/manifest.json", manifest);
  state = LoadCheckpoint(dir, &a.model, nullptr);
  EXPECT_EQ(state.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(state.status().message(), HasSubstr(dir + "/manifest.json"));
  EXPECT_THAT(state.status().message(), HasSubstr("unsupported checkpoint version 2"));
  // No manifest at all.
  fs::remove(dir + "/manifest.json");
  state = LoadCheckpoint(dir, &a.model, nullptr);
  EXPECT_EQ(state.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(state.status().message(), HasSubstr(dir + "/manifest.json"));
}

TEST(CheckpointTest, InitFromWeightsReadsAStepDirectoryOrABareSafetensorsFile) {
  TempDir tmp;
  MlpRun a(1);
  a.Step(0);
  CheckpointManager manager(tmp.File("run"), 0);
  ASSERT_TRUE(manager.Save(a.model, a.optimizer.get(), StateAt(1)).ok());
  MlpRun from_dir(2);
  ASSERT_TRUE(InitFromWeights(tmp.File("run/step-00000001"), &from_dir.model).ok());
  ExpectBitwiseEqual(from_dir.model.StateDict(), a.model.StateDict());
  EXPECT_EQ(from_dir.optimizer->state(0).step, 0);  // weights only

  ASSERT_TRUE(SaveSafetensors(tmp.File("weights.safetensors"), a.model.StateDict()).ok());
  MlpRun from_file(3);
  ASSERT_TRUE(InitFromWeights(tmp.File("weights.safetensors"), &from_file.model).ok());
  ExpectBitwiseEqual(from_file.model.StateDict(), a.model.StateDict());
}

TEST(CheckpointTest, InitFromWeightsIsStrictAndNamesThePath) {
  TempDir tmp;
  MlpRun a(1);
  ASSERT_TRUE(SaveSafetensors(tmp.File("w.safetensors"), {a.model.StateDict()[0]}).ok());
  Status s = InitFromWeights(tmp.File("w.safetensors"), &a.model);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(tmp.File("w.safetensors")));
  EXPECT_THAT(s.message(), HasSubstr("fc2.bias"));

  s = InitFromWeights(tmp.path(), &a.model);  // a run directory, not a step directory
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("step-NNNNNNNN"));
  s = InitFromWeights(tmp.File("absent.safetensors"), &a.model);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(tmp.File("absent.safetensors")));
}

}  // namespace
}  // namespace trainyard::trainer
