// End-to-end: the real `trainyard train` binary, run as a user runs it, on real data. The
// acceptance runs train the examples in examples/ on Fashion-MNIST and the King James Bible
// (scripts/test.sh installs them; scripts/get-data.sh writes data/kjv.txt).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "common/json.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::ProcessResult;
using testing::RunProcess;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kBin = TY_TRAINYARD_BIN;
const std::string kSource = TY_SOURCE_DIR;

ProcessResult Train(std::vector<std::string> args, std::chrono::milliseconds timeout = 900s) {
  args.insert(args.begin(), {kBin, "train"});
  return RunProcess(args, timeout);
}

Json SummaryOf(const ProcessResult& r) {
  StatusOr<Json> json = Json::Parse(r.out);
  EXPECT_TRUE(json.ok()) << json.status() << "\nstdout: " << r.out << "\nstderr: " << r.err;
  return json.ok() ? *json : Json::Object();
}

double Number(const Json& json, const std::string& path) {
  StatusOr<double> v = json.Get<double>(path);
  EXPECT_TRUE(v.ok()) << v.status() << " in " << json.Dump();
  return v.ok() ? *v : std::nan("");
}

// A small tabular job that runs for a long time (for stopping it) or briefly.
std::string WriteCsvSpec(const TempDir& dir, int64_t steps) {
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 0.5);
  std::ofstream csv(dir.path() + "/data.csv");
  for (int i = 0; i < 400; ++i) {
    const int c = static_cast<int>(rng() % 3);
    csv << c + noise(rng) << "," << -c + noise(rng) << "," << c << "\n";
  }
  csv.close();
  const std::string spec = dir.path() + "/spec.yaml";
  std::ofstream out(spec);
  out << "name: csv-test\n"
      << "model: {mlp: {sizes: [2, 32, 3]}}\n"
      << "data: {csv: {path: " << dir.path() << "/data.csv}}\n"
      << "optimizer: {sgd: {lr: 0.05, momentum: 0.9}}\n"
      << "batch_size: 8\nsteps: " << steps << "\n"
      << "checkpoint: {dir: " << dir.path() << "/ckpt}\n";
  return spec;
}

TEST(TrainCliTest, PrintsASummaryAsJsonAndSavesACheckpoint) {
  TempDir dir;
  ProcessResult r = Train({WriteCsvSpec(dir, 60), "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json s = SummaryOf(r);
  EXPECT_EQ(*s.Find("name"), Json("csv-test"));
  EXPECT_EQ(Number(s, "steps"), 60);
  EXPECT_GT(Number(s, "eval.accuracy"), 0.8);
  EXPECT_GT(Number(s, "final_train_loss"), 0);
  EXPECT_EQ(*s.Find("checkpoint"), Json(dir.path() + "/ckpt/step-00000060"));
  EXPECT_TRUE(fs::exists(dir.path() + "/ckpt/step-00000060/model.safetensors"));
  EXPECT_THAT(r.err, HasSubstr("csv-test: mlp (195 parameters)"));
  EXPECT_THAT(r.err, HasSubstr("step 60/60 (100.0%)"));
  EXPECT_THAT(r.err, ContainsRegex("memory [0-9.]+ [KMG]iB peak, [0-9.]+ [KMG]iB reserved"));

  // The human summary goes to stdout; the finished run resumes at its end and trains nothing.
  ProcessResult again = Train({dir.path() + "/spec.yaml"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("resuming from " + dir.path() + "/ckpt/step-00000060"));
  EXPECT_THAT(again.out, HasSubstr("csv-test: 60 steps (0 in this run)"));
}

TEST(TrainCliTest, BadSpecsAndUsageExitWithTwoAndSayWhatIsWrong) {
  TempDir dir;
  const std::string spec = dir.path() + "/bad.yaml";
  std::ofstream(spec) << "model: {mlp: {sizes: [784, 10]}}\ndata: {fashion_mnist: {}}\n"
                         "optimizer: {sgd: {lr: -1}}\nbatch_size: 0\nepocs: 2\n";
  ProcessResult r = Train({spec});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("trainyard: error: " + spec + ": invalid job spec (3 problems)"));
  EXPECT_THAT(r.err, HasSubstr("optimizer.sgd.lr = -1: must be finite and >= 0"));
  EXPECT_THAT(r.err, HasSubstr("batch_size = 0: must be in [1, 1048576]"));
  EXPECT_THAT(r.err, HasSubstr("unknown field epocs (did you mean epochs?)"));

  r = Train({dir.path() + "/missing.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("missing.yaml"));

  std::ofstream(spec) << "model: {mlp: {sizes: [784, 10]}\n";
  r = Train({spec});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(spec + ":"));

  r = Train({spec, "--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option --bogus"));
  r = RunProcess({kBin, "frobnicate"}, 30s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command \"frobnicate\""));
  r = RunProcess({kBin, "version"}, 30s);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("trainyard 0.1.0"));
}

TEST(TrainCliTest, MissingDataIsARunErrorNamingTheFieldAndFile) {
  TempDir dir;
  const std::string spec = WriteCsvSpec(dir, 10);
  fs::remove(dir.path() + "/data.csv");
  ProcessResult r = Train({spec});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("trainyard: error: data.csv.path"));
  EXPECT_THAT(r.err, HasSubstr(dir.path() + "/data.csv"));
}

TEST(TrainCliTest, SigintSavesACheckpointAndTheNextRunResumesFromIt) {
  TempDir dir;
  const std::string spec = WriteCsvSpec(dir, 100000000);
  Subprocess p({kBin, "train", spec, "-o", "json"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.WaitForStderr("step 1/", 60s)) << "no progress line";
  p.Signal(SIGINT);
  ProcessResult r = p.Wait(60s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_THAT(r.err, HasSubstr("stopping after this step"));
  Json s = SummaryOf(r);
  EXPECT_EQ(*s.Find("interrupted"), Json(true));
  const int64_t stopped = static_cast<int64_t>(Number(s, "steps"));
  EXPECT_GE(stopped, 1);
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(stopped));
  EXPECT_EQ(*s.Find("checkpoint"), Json(dir.path() + "/ckpt/" + name));

  r = Train({spec, "--set", "steps=" + std::to_string(stopped + 5), "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json resumed = SummaryOf(r);
  EXPECT_EQ(Number(resumed, "steps_this_run"), 5);
  EXPECT_EQ(*resumed.Find("resumed_from"), Json(dir.path() + "/ckpt/" + name));
}

// --- Acceptance: the examples on real data ---------------------------------------------------

TEST(AcceptanceTest, FashionMlpReaches85PercentInOneEpoch) {
  TempDir dir;
  ProcessResult r = Train({kSource + "/examples/fashion-mlp.yaml", "-o", "json", "--set",
                           "checkpoint.dir=" + dir.path() + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json s = SummaryOf(r);
  EXPECT_EQ(Number(s, "steps"), 938);  // one epoch of 60 000 at batch 64
  EXPECT_EQ(Number(s, "eval.samples"), 10000);
  EXPECT_GE(Number(s, "eval.accuracy"), 0.85);
  std::cout << "fashion-mlp: test accuracy " << Number(s, "eval.accuracy") << " in "
            << Number(s, "seconds") << " s\n";
}

TEST(AcceptanceTest, FashionCnnReaches89PercentInTwoEpochs) {
  TempDir dir;
  ProcessResult r = Train({kSource + "/examples/fashion-cnn.yaml", "-o", "json", "--set",
                           "checkpoint.dir=" + dir.path() + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json s = SummaryOf(r);
  EXPECT_EQ(Number(s, "steps"), 2 * 938);
  EXPECT_GE(Number(s, "eval.accuracy"), 0.89);
  std::cout << "fashion-cnn: test accuracy " << Number(s, "eval.accuracy") << " in "
            << Number(s, "seconds") << " s\n";
}

TEST(AcceptanceTest, KjvGptValidationLossFallsSteadily) {
  // The example, shortened: 240 steps with an evaluation every 60.
  TempDir dir;
  const std::string text = kSource + "/data/kjv.txt";
  ASSERT_TRUE(fs::exists(text)) << text << " is missing: run scripts/get-data.sh";
  ProcessResult r = Train({kSource + "/examples/kjv-gpt.yaml", "-o", "json",
                           "--set", "data.text.path=" + text, "--set", "steps=240",
                           "--set", "eval.every_steps=60", "--set", "schedule.cosine.warmup_steps=20",
                           "--set", "checkpoint.dir=" + dir.path() + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> curve;
  std::regex eval_re(R"(eval at step (\d+): loss ([0-9.]+))");
  for (std::sregex_iterator m(r.err.begin(), r.err.end(), eval_re), end; m != end; ++m) {
    curve.push_back(std::stod((*m)[2]));
  }
  ASSERT_EQ(curve.size(), 4u) << r.err;  // steps 60, 120, 180 and 240
  for (size_t i = 1; i < curve.size(); ++i) {
    EXPECT_LT(curve[i], curve[i - 1]) << "validation loss rose at evaluation " << i;
  }
  EXPECT_LT(curve.back(), 2.6);  // a uniform guess over ~75 characters is ln(75) = 4.3
  EXPECT_TRUE(fs::exists(dir.path() + "/run/vocabulary.txt"));
  std::cout << "kjv-gpt validation loss:";
  for (double v : curve) std::cout << " " << v;
  std::cout << "\n";
}

}  // namespace
}  // namespace trainyard
