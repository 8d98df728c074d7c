#include "client/train_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <thread>

#include "client/spec_file.h"
#include "common/json.h"
#include "kernels/cpu/parallel.h"
#include "worker/trainer/trainer.h"

namespace trainyard::client {
namespace {

constexpr const char* kUsage =
    "usage: trainyard train SPEC.yaml [-o json] [--set path=value]... [--quiet]\n"
    "  SPEC.yaml      a job spec (YAML, or JSON by its .json name): proto/trainyard/v1/job.proto\n"
    "  -o json        print the final summary as one JSON object on stdout\n"
    "  --set p=v      override one spec field, e.g. --set steps=200 --set optimizer.sgd.lr=0.05\n"
    "  --quiet        no progress line (errors and the summary still print)\n";

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  if (g_stop.exchange(true)) {  // the second signal: stop now
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal = sig;
  const char msg[] = "\ntrainyard: stopping after this step (a checkpoint is saved when "
                     "checkpoint.dir is set); signal again to abort\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)ignored;
}

std::string Fixed(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// 1234567.8 -> "1,234,568"
std::string Grouped(double v) {
  if (!std::isfinite(v)) return "n/a";
  std::string digits = std::to_string(static_cast<long long>(std::llround(v)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long long s = std::llround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

// The progress line: rewritten in place on a terminal, else printed every few seconds.
class Progress {
 public:
  Progress(bool quiet, bool text) : quiet_(quiet), text_(text), tty_(::isatty(STDERR_FILENO)) {}

  void Step(const trainer::StepMetrics& m) {
    // Throughput and ETA come from the steps since the first of this run (which pays for
    // warming up caches and the allocator); the loss shown is smoothed.
    const auto now = std::chrono::steady_clock::now();
    if (steps_ == 0) {
      first_ = now;
      step_seconds_ = m.data_seconds + m.forward_seconds + m.backward_seconds + m.optimizer_seconds;
    } else {
      units_ += text_ ? m.tokens : m.samples;
      step_seconds_ = std::chrono::duration<double>(now - first_).count() / static_cast<double>(steps_);
    }
    ++steps_;
    loss_ = loss_ < 0 ? m.loss : 0.9 * loss_ + 0.1 * m.loss;
    if (quiet_) return;
    const bool last = m.step == m.total_steps;
    if (!last && now - last_print_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::seconds(5))) {
      return;
    }
    last_print_ = now;
    const double rate =
        steps_ > 1 ? static_cast<double>(units_) / std::chrono::duration<double>(now - first_).count()
                   : static_cast<double>(text_ ? m.tokens : m.samples) / step_seconds_;
    const std::string line =
        "step " + std::to_string(m.step) + "/" + std::to_string(m.total_steps) + " (" +
        Fixed(100.0 * m.step / m.total_steps, 1) + "%)  epoch " + std::to_string(m.epoch + 1) +
        "  loss " + Fixed(loss_, 4) + "  lr " + ShortNumber(m.lr) + "  " + Grouped(rate) +
        (text_ ? " tokens/s" : " samples/s") + "  ETA " +
        Duration(step_seconds_ * static_cast<double>(m.total_steps - m.step));
    Print(line, /*keep=*/!tty_);
  }

  void Eval(const trainer::EvalMetrics& m) {
    if (quiet_) return;
    Print("eval at step " + std::to_string(m.step) + ": loss " + Fixed(m.loss, 4) + ", accuracy " +
              Fixed(100 * m.accuracy, 2) + "% on " + Grouped(static_cast<double>(m.samples)) +
              (text_ ? " windows" : " samples") + " (" + Fixed(m.seconds, 1) + " s)",
          /*keep=*/true);
  }

  void Note(const std::string& text) {
    if (quiet_) return;
    Print(text, /*keep=*/true);
  }

  // Ends an in-place line before other output.
  void Close() {
    if (open_) std::fputs("\n", stderr);
    open_ = false;
  }

 private:
  static std::string ShortNumber(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3g", v);
    return buf;
  }
  void Print(const std::string& line, bool keep) {
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      open_ = true;
      if (keep) Close();
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  bool quiet_, text_, tty_;
  bool open_ = false;
  int64_t steps_ = 0;   // steps seen
  int64_t units_ = 0;   // samples (tokens for text) after the first step
  std::chrono::steady_clock::time_point first_;  // when the first step ended
  double step_seconds_ = 0;
  double loss_ = -1;
  std::chrono::steady_clock::time_point last_print_{};
};

Json NumberOrNull(double v) { return std::isfinite(v) ? Json(v) : Json(); }

Json SummaryJson(const trainer::TrainSummary& s) {
  Json eval;
  if (s.eval) {
    eval = Json::Object({{"loss", NumberOrNull(s.eval->loss)},
                         {"accuracy", NumberOrNull(s.eval->accuracy)},
                         {"samples", s.eval->samples},
                         {"step", s.eval->step}});
  }
  return Json::Object({
      {"name", s.name},
      {"steps", s.steps},
      {"total_steps", s.total_steps},
      {"steps_this_run", s.steps_this_run},
      {"final_train_loss", NumberOrNull(s.final_train_loss)},
      {"eval", eval},
      {"seconds", s.seconds},
      {"samples_per_second", NumberOrNull(s.samples_per_second)},
      {"tokens_per_second", NumberOrNull(s.tokens_per_second)},
      {"checkpoint", s.checkpoint.empty() ? Json() : Json(s.checkpoint)},
      {"resumed_from", s.resumed_from.empty() ? Json() : Json(s.resumed_from)},
      {"interrupted", s.interrupted},
  });
}

void PrintSummary(const trainer::TrainSummary& s, bool text) {
  std::string out = s.name + ": " + (s.interrupted ? "stopped at step " : "") +
                    std::to_string(s.steps) + (s.interrupted ? " of " + std::to_string(s.total_steps) : " steps") +
                    " (" + std::to_string(s.steps_this_run) + " in this run) in " + Duration(s.seconds) +
                    ", " + Grouped(text ? s.tokens_per_second : s.samples_per_second) +
                    (text ? " tokens/s\n" : " samples/s\n");
  out += "  train loss   " + Fixed(s.final_train_loss, 4) + " (mean of the last 50 steps)\n";
  if (s.eval) {
    out += "  eval         loss " + Fixed(s.eval->loss, 4) + ", accuracy " +
           Fixed(100 * s.eval->accuracy, 2) + "% on " + Grouped(static_cast<double>(s.eval->samples)) +
           (text ? " windows\n" : " samples\n");
  }
  if (!s.resumed_from.empty()) out += "  resumed from " + s.resumed_from + "\n";
  if (!s.checkpoint.empty()) out += "  checkpoint   " + s.checkpoint + "\n";
  std::fputs(out.c_str(), stdout);
}

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "trainyard: error: %s\n", message.c_str());
  return code;
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) {
  std::string spec_path;
  std::vector<std::string> overrides;
  bool json = false, quiet = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-o" || a == "--output") {
      if (i + 1 >= args.size() || (args[i + 1] != "json" && args[i + 1] != "text")) {
        return Fail(a + " takes json or text\n" + kUsage, 2);
      }
      json = args[++i] == "json";
    } else if (a == "--set") {
      if (i + 1 >= args.size()) return Fail("--set takes path=value\n" + std::string(kUsage), 2);
      overrides.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      overrides.push_back(a.substr(6));
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      return Fail("unknown option " + a + "\n" + kUsage, 2);
    } else if (spec_path.empty()) {
      spec_path = a;
    } else {
      return Fail("one spec file, got " + spec_path + " and " + a + "\n" + kUsage, 2);
    }
  }
  if (spec_path.empty()) return Fail(std::string("no spec file given\n") + kUsage, 2);

  StatusOr<spec::JobSpec> spec = LoadJobSpec(spec_path, overrides);
  if (!spec.ok()) return Fail(std::string(spec.status().message()), 2);
  const bool text = spec->data.source == "text" || spec->data.source == "tokens";

  Progress progress(quiet, text);
  trainer::TrainerOptions options;
  options.stop = &g_stop;
  options.on_step = [&](const trainer::StepMetrics& m) { progress.Step(m); };
  options.on_eval = [&](const trainer::EvalMetrics& m) { progress.Eval(m); };
  options.on_checkpoint = [&](const std::string& dir, int64_t) { progress.Note("checkpoint " + dir); };

  StatusOr<std::unique_ptr<trainer::Trainer>> trainer = trainer::Trainer::Create(*spec, options);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()), 1);
  const trainer::Trainer& t = **trainer;
  progress.Note(spec->name + ": " + spec->model.arch + " (" +
                Grouped(static_cast<double>(t.num_parameters())) + " parameters) on " +
                t.data().description + "; " + std::to_string(t.total_steps()) + " steps of " +
                std::to_string(spec->batch_size) + ", " +
                std::to_string(kernels::cpu::GetNumThreads()) + " threads");
  if (!t.resumed_from().empty()) {
    progress.Note("resuming from " + t.resumed_from() + " at step " + std::to_string(t.step()));
  }

  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int, old_term;
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  StatusOr<trainer::TrainSummary> summary = (*trainer)->Run();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  progress.Close();
  if (!summary.ok()) return Fail(std::string(summary.status().message()), 1);

  if (json) {
    std::printf("%s\n", SummaryJson(*summary).Dump().c_str());
  } else {
    PrintSummary(*summary, text);
  }
  std::fflush(stdout);
  if (summary->interrupted) return 128 + (g_signal.load() ? g_signal.load() : SIGINT);
  return 0;
}

}  // namespace trainyard::client
