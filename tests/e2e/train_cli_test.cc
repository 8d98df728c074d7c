// End-to-end: the real `trainyard train` binary, run as a user runs it, on real data. The
// acceptance runs train the examples in examples/ on Fashion-MNIST and the King James Bible
// (scripts/test.sh installs them; scripts/get-data.sh writes data/kjv.txt).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

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

  // The finished run, run again, says it is already complete, trains nothing and exits 0.
  ProcessResult again = Train({dir.path() + "/spec.yaml"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("resuming from " + dir.path() + "/ckpt/step-00000060"));
  EXPECT_THAT(again.err, HasSubstr("csv-test is already complete"));
  again = Train({dir.path() + "/spec.yaml", "-o", "json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  Json done = SummaryOf(again);
  EXPECT_EQ(*done.Find("already_complete"), Json(true));
  EXPECT_EQ(Number(done, "steps"), 60);
  EXPECT_EQ(Number(done, "steps_this_run"), 0);
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

  // metrics.jsonl is one continuous history across the stop: steps 1 .. stopped + 5, once each
  // (the run stopped at a step boundary, so nothing was trained twice), and `trainyard plot`
  // draws it.
  std::ifstream in(dir.path() + "/ckpt/metrics.jsonl");
  int64_t expected = 1;
  for (std::string line; std::getline(in, line);) {
    StatusOr<Json> j = Json::Parse(line);
    ASSERT_TRUE(j.ok()) << line;
    if (*j->Find("type") != Json("step")) continue;
    EXPECT_EQ(*j->Find("step"), Json(expected)) << line;
    EXPECT_TRUE(j->Find("loss")->is_number()) << line;
    ++expected;
  }
  EXPECT_EQ(expected, stopped + 6);
  r = RunProcess({kBin, "plot", dir.path() + "/ckpt", "-o", dir.path() + "/loss.svg"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream svg(dir.path() + "/loss.svg");
  std::stringstream text;
  text << svg.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("<svg"));
  EXPECT_THAT(text.str(), HasSubstr("<polyline"));
}

// Note [Run identity] as a user meets it: the same run again is already complete; twice the
// global batch (2 ranks of the same batch) is another run, refused with the ways on; --fresh
// moves the old run aside and trains from step 0; --resume-from continues it deliberately.
TEST(TrainCliTest, ARunNeverContinuesAnothersCheckpoint) {
  TempDir dir;
  const std::string spec = WriteCsvSpec(dir, 6);
  ProcessResult r = Train({spec, "--quiet"}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Train({spec, "--quiet"}, 120s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("csv-test is already complete: " + dir.path() +
                               "/ckpt/step-00000006 is at step 6 of 6"));

  r = Train({spec, "--quiet", "--nproc", "2", "--set", "steps=9"}, 120s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(
      r.err, HasSubstr("checkpoint.dir " + dir.path() + "/ckpt holds a checkpoint of another run"));
  EXPECT_THAT(r.err,
              HasSubstr("batch_size x world_size x grad_accumulation_steps: 8 there, 16 here"));
  EXPECT_THAT(r.err, HasSubstr("--resume-from " + dir.path() + "/ckpt/step-00000006"));

  // Deliberately: continues at step 6 with 2 ranks, in another directory.
  r = Train({spec, "--quiet", "--nproc", "2", "--set", "steps=9", "--set",
             "checkpoint.dir=" + dir.path() + "/ckpt2", "--resume-from",
             dir.path() + "/ckpt/step-00000006", "-o", "json"},
            120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Number(SummaryOf(r), "steps_this_run"), 3);

  r = Train({spec, "--quiet", "--nproc", "2", "--set", "steps=9", "--fresh", "-o", "json"}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--fresh: moved"));
  Json s = SummaryOf(r);
  EXPECT_TRUE(s.Find("resumed_from")->is_null());
  EXPECT_EQ(Number(s, "steps_this_run"), 9);
  int kept = 0;
  for (const auto& e : fs::directory_iterator(dir.path() + "/ckpt")) {
    if (e.path().filename().string().rfind("previous-", 0) != 0) continue;
    kept += fs::exists(e.path() / "step-00000006" / "manifest.json");
    EXPECT_TRUE(fs::exists(e.path() / "metrics.jsonl")) << e.path();
  }
  EXPECT_EQ(kept, 1) << "the old run is kept under previous-*";
}

// num_threads above what the system lets the process start (here RLIMIT_NPROC 16 for an
// unprivileged user; root ignores the limit, so the binary runs as nobody) is an error naming
// the number it can have, not an uncaught std::system_error.
TEST(TrainCliTest, MoreThreadsThanTheSystemAllowsIsAClearError) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the binary as nobody under a limit";
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string bin = dir.path() + "/trainyard";
  fs::copy_file(kBin, bin);
  const std::string spec = WriteCsvSpec(dir, 2);
  for (const std::string& f : {spec, dir.path() + "/data.csv"}) ::chmod(f.c_str(), 0644);
  ::chmod(bin.c_str(), 0755);
  ProcessResult r =
      RunProcess({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  "/usr/bin/prlimit", "--nproc=16", bin, "train", spec, "--quiet", "--set",
                  "num_threads=64", "--set", "checkpoint.dir=" + dir.path() + "/c"},
                 60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err,
              ContainsRegex("num_threads = 64: the system let this process start only [0-9]+ "
                            "threads .*; set num_threads to [0-9]+ or fewer"));
}

TEST(TrainCliTest, MetricsFileTakesTheStepsWhereverItIsAsked) {
  TempDir dir;
  const std::string spec = WriteCsvSpec(dir, 5);
  ProcessResult r = Train({spec, "--quiet", "--metrics-file", dir.path() + "/m.jsonl"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir.path() + "/ckpt/metrics.jsonl"));
  std::ifstream in(dir.path() + "/m.jsonl");
  int steps = 0, evals = 0;
  for (std::string line; std::getline(in, line);) {
    StatusOr<Json> j = Json::Parse(line);
    ASSERT_TRUE(j.ok()) << line;
    steps += *j->Find("type") == Json("step");
    evals += *j->Find("type") == Json("eval");
  }
  EXPECT_EQ(steps, 5);
  EXPECT_EQ(evals, 1);
}

// A spec that validates but cannot fit this machine (1.1e12 parameters with AdamW) is refused
// before anything is allocated, saying what it needs; special files are refused as data.
TEST(TrainCliTest, AJobThatCannotFitOrReadsASpecialFileIsRefusedClearly) {
  TempDir dir;
  const std::string spec = WriteCsvSpec(dir, 5);
  const std::string huge = dir.path() + "/huge.yaml";
  std::ofstream(huge) << "model: {mlp: {sizes: [2, 1048576, 1048576, 3]}}\n"
                      << "data: {csv: {path: " << dir.path() << "/data.csv}}\n"
                      << "optimizer: {adamw: {}}\nsteps: 5\n";
  ProcessResult r = Train({huge}, 60s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the job needs about"));
  EXPECT_THAT(r.err, HasSubstr("this machine lets it use"));

  // Out of memory (here under a 2.5 GB address-space limit, past the machine check): an error
  // that says so and exit 1, not an abort.
  const std::string big = dir.path() + "/big.yaml";
  std::ofstream(big) << "model: {mlp: {sizes: [2, 100000, 2000, 3]}}\n"
                     << "data: {csv: {path: " << dir.path() << "/data.csv}}\n"
                     << "optimizer: {adamw: {}}\nsteps: 3\n";
  r = RunProcess(
      {"/bin/bash", "-c", "ulimit -v 2500000; exec " + kBin + " train " + big + " --quiet"}, 120s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("error: out of memory: allocating"));
  EXPECT_THAT(r.err, HasSubstr("MiB of tensors in use"));

  r = Train({spec, "--set", "data.csv.path=/dev/zero"}, 60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/dev/zero is a character device; data must be a regular file"));
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
  ProcessResult r =
      Train({kSource + "/examples/kjv-gpt.yaml", "-o", "json", "--set", "data.text.path=" + text,
             "--set", "steps=240", "--set", "eval.every_steps=60", "--set",
             "schedule.cosine.warmup_steps=20", "--set", "checkpoint.dir=" + dir.path() + "/run"});
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
