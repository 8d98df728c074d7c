// The training thread's stall per checkpoint, asynchronous (checkpoint.async: true) beside
// synchronous, on kjv-gpt (examples/kjv-gpt.yaml's model, data, optimizer and batch; evaluation
// only at the end). scripts/get-data.sh writes data/kjv.txt.
//
//   checkpoint_stall_bench [--text data/kjv.txt] [--steps 60] [--every 10] [--threads 2]
//                          [--rounds 1] [--dir /tmp/ty-ckpt-bench]
//
// Each round trains `steps` steps checkpointing every `every`, once per mode (async first, then
// sync; fresh checkpoint directories). The stall after step k is the host time from step k's
// report (on_step) until step k + 1 begins (its report's time less its own duration), less the
// median of that gap after steps without a checkpoint (the metrics line written after every
// step): for sync the whole write, for async the optimizer's state dict, the snapshot copy and
// any wait for the previous write. "next step" is the mean duration of the steps just after a
// checkpoint (during an asynchronous write), "step" that of the others. Prints a table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/spec/job_spec.h"
#include "kernels/cpu/parallel.h"
#include "worker/trainer/trainer.h"

namespace ty = trainyard;

namespace {

struct Flags {
  std::string text = "data/kjv.txt";
  std::string dir = "/tmp/ty-ckpt-bench";
  int steps = 60;
  int every = 10;
  int threads = 2;
  int rounds = 1;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "checkpoint_stall_bench: %s\nusage: checkpoint_stall_bench [--text PATH] "
               "[--steps S] [--every K] [--threads N] [--rounds R] [--dir DIR]\n",
               why.c_str());
  std::exit(2);
}

int IntFlag(const std::string& flag, const char* value) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 1 || v > 100000) {
    Usage(flag + " is \"" + value + "\"; it must be a whole number from 1 to 100000");
  }
  return static_cast<int>(v);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--text") {
      f.text = value;
    } else if (flag == "--dir") {
      f.dir = value;
    } else if (flag == "--steps") {
      f.steps = IntFlag(flag, value);
    } else if (flag == "--every") {
      f.every = IntFlag(flag, value);
    } else if (flag == "--threads") {
      f.threads = IntFlag(flag, value);
    } else if (flag == "--rounds") {
      f.rounds = IntFlag(flag, value);
    } else {
      Usage("unknown flag " + flag);
    }
  }
  if (f.every >= f.steps) Usage("--every must be below --steps");
  return f;
}

// examples/kjv-gpt.yaml, but for the step count (warmup at most half of it), evaluation and
// checkpoint fields.
ty::spec::JobSpec KjvGpt(const Flags& f, const std::string& dir, bool async) {
  const std::string text = R"({"name": "kjv-gpt",
    "model": {"gpt": {"context": 128, "n_layer": 4, "n_head": 4, "n_embd": 256, "dropout": 0.1}},
    "data": {"text": {"path": ")" +
                           f.text +
                           R"(", "vocabulary": "char", "eval_fraction": 0.1}},
    "optimizer": {"adamw": {"lr": 0.001, "beta2": 0.99, "weight_decay": 0.1}},
    "schedule": {"cosine": {"warmup_steps": )" +
                           std::to_string(std::min(100, f.steps / 2)) + R"(, "min_lr": 0.0001}},
    "grad_clip_norm": 1.0, "batch_size": 16, "seed": 1, "eval": {"max_batches": 1},
    "steps": )" + std::to_string(f.steps) +
                           R"(, "checkpoint": {"dir": ")" + dir + R"(", "every_steps": )" +
                           std::to_string(f.every) + R"(, "async": )" + (async ? "true" : "false") +
                           "}}";
  ty::StatusOr<ty::Json> json = ty::Json::Parse(text);
  if (!json.ok()) Usage("bad spec: " + std::string(json.status().message()));
  ty::StatusOr<ty::spec::JobSpec> spec = ty::spec::ParseJobSpec(*json);
  if (!spec.ok()) Usage("bad spec: " + std::string(spec.status().message()));
  return *spec;
}

struct Result {
  std::vector<double> stalls;  // seconds, one per checkpoint during the run
  double step = 0;             // mean seconds of steps not just after a checkpoint
  double next_step = 0;        // mean seconds of steps just after one
  double wall = 0;             // Run's seconds
  int64_t checkpoint_mb = 0;   // model + optimizer files of the last checkpoint, MiB
};

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per step: when its report came (steady seconds) and how long the step itself took.
struct Report {
  double at = 0;
  double seconds = 0;
};

Result Summarise(const std::vector<Report>& reports, int every) {
  Result r;
  std::vector<double> plain_gaps, steps, next_steps;
  std::vector<double> checkpoint_gaps;
  for (size_t i = 0; i + 1 < reports.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i) + 1;
    const double gap = reports[i + 1].at - reports[i + 1].seconds - reports[i].at;
    const bool saved = step % every == 0;
    (saved ? checkpoint_gaps : plain_gaps).push_back(gap);
    (saved ? next_steps : steps).push_back(reports[i + 1].seconds);
  }
  const double baseline = Median(plain_gaps);
  for (double g : checkpoint_gaps) r.stalls.push_back(std::max(0.0, g - baseline));
  r.step = Mean(steps);
  r.next_step = Mean(next_steps);
  return r;
}

int64_t CheckpointMiB(const std::string& dir) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "optimizer.safetensors") {
      bytes += static_cast<int64_t>(entry.file_size());
    }
  }
  return bytes >> 20;
}

Result RunOnce(const Flags& f, bool async, int round) {
  const std::string dir = f.dir + "/" + (async ? "async-" : "sync-") + std::to_string(round);
  std::filesystem::remove_all(dir);
  std::vector<Report> reports;
  ty::trainer::TrainerOptions options;
  options.on_step = [&](const ty::trainer::StepMetrics& m) {
    const double now =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    reports.push_back({now, static_cast<double>(m.samples) / m.samples_per_second});
  };
  auto trainer = ty::trainer::Trainer::Create(KjvGpt(f, dir, async), options);
  if (!trainer.ok()) Usage("cannot start: " + std::string(trainer.status().message()));
  auto summary = (*trainer)->Run();
  if (!summary.ok()) Usage("the run failed: " + std::string(summary.status().message()));
  Result r = Summarise(reports, f.every);
  r.wall = summary->seconds;
  r.checkpoint_mb = CheckpointMiB(dir + "/" + ty::trainer::StepDirName(f.steps));
  return r;
}

void Print(const char* mode, const Result& r) {
  std::vector<double> ms;
  for (double s : r.stalls) ms.push_back(s * 1e3);
  const double mean = Mean(ms);
  std::printf("| %-5s | %5zu | %8.1f | %8.1f | %8.1f | %6.1f%% | %8.1f | %9.1f | %7.1f |\n", mode,
              ms.size(), mean, Median(ms), ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()),
              100 * mean / (r.step * 1e3), r.step * 1e3, r.next_step * 1e3, r.wall);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  ty::kernels::cpu::SetNumThreads(f.threads);
  std::printf("kjv-gpt, %d steps, a checkpoint every %d, %d threads, %d round(s)\n", f.steps,
              f.every, f.threads, f.rounds);
  std::printf(
      "| mode  | saves | stall ms | median   | max ms   | of step | step ms  | next step | "
      "wall s  |\n|---|---|---|---|---|---|---|---|---|\n");
  int64_t mib = 0;
  for (int round = 0; round < f.rounds; ++round) {
    for (const bool async : {true, false}) {
      const Result r = RunOnce(f, async, round);
      mib = r.checkpoint_mb;
      Print(async ? "async" : "sync", r);
      std::fflush(stdout);
    }
  }
  std::printf("checkpoint: %lld MiB of weights and optimizer state\n", static_cast<long long>(mib));
  return 0;
}
