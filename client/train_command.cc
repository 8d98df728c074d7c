#include "client/train_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "client/format.h"
#include "client/launch.h"
#include "client/spec_file.h"
#include "client/train_preflight.h"
#include "common/json.h"
#include "common/signals.h"
#include "common/spec/model_graph.h"
#include "kernels/cpu/parallel.h"
#include "worker/dist/process_group.h"
#include "worker/dist/store.h"
#include "worker/ranks/env.h"
#include "worker/ranks/group.h"
#include "worker/trainer/trainer.h"

namespace trainyard::client {
namespace {

constexpr const char* kUsage =
    "usage: trainyard train SPEC.yaml [-o json] [--set path=value]... [--quiet] [--nproc N]\n"
    "                       [--fresh] [--resume-from STEP_DIR]\n"
    "  SPEC.yaml      a job spec (YAML, or JSON by its .json name): proto/trainyard/v1/job.proto\n"
    "  -o json        print the final summary as one JSON object on stdout\n"
    "  --set p=v      override one spec field, e.g. --set steps=200 --set optimizer.sgd.lr=0.05\n"
    "  --quiet        no progress line (errors and the summary still print)\n"
    "  --metrics-file F  write every step's and evaluation's metrics to F as JSON lines\n"
    "                 (default: checkpoint.dir/metrics.jsonl when checkpoint.dir is set)\n"
    "  --fresh        start at step 0: move checkpoint.dir's contents (checkpoints, metrics)\n"
    "                 into checkpoint.dir/previous-<time>/ first, keeping them\n"
    "  --resume-from STEP_DIR  continue the run that wrote this checkpoint, even another run's\n"
    "                 (checkpoint.resume_from); checkpoint.dir's own checkpoints of this run\n"
    "                 come first\n"
    "  --nproc N      train as N processes on this machine (data parallel over gloo), each with\n"
    "                 cores/N threads unless num_threads or TY_NUM_THREADS says otherwise; rank 0\n"
    "                 prints progress and the summary, the others' errors come prefixed [rank r].\n"
    "                 Default: parallelism.world_size (1: this process); when the spec sets it\n"
    "                 too, the two must agree\n";

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  if (g_stop.exchange(true)) {  // the second signal: stop now
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal = sig;
  const char msg[] =
      "\ntrainyard: stopping after this step (a checkpoint is saved when "
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

// 1536 -> "1.5 KiB", 3 << 30 -> "3.0 GiB".
std::string Bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return Fixed(v, u == 0 ? 0 : 1) + " " + units[u];
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
      step_seconds_ =
          std::chrono::duration<double>(now - first_).count() / static_cast<double>(steps_);
    }
    ++steps_;
    skipped_ += m.skipped;
    loss_ = loss_ < 0 ? m.loss : 0.9 * loss_ + 0.1 * m.loss;
    if (quiet_) return;
    const bool last = m.step == m.total_steps;
    if (!last &&
        now - last_print_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::seconds(5))) {
      return;
    }
    last_print_ = now;
    const double rate =
        steps_ > 1
            ? static_cast<double>(units_) / std::chrono::duration<double>(now - first_).count()
            : static_cast<double>(text_ ? m.tokens : m.samples) / step_seconds_;
    const std::string line =
        "step " + std::to_string(m.step) + "/" + std::to_string(m.total_steps) + " (" +
        Fixed(100.0 * m.step / m.total_steps, 1) + "%)  epoch " + std::to_string(m.epoch + 1) +
        "  loss " + Fixed(loss_, 4) + "  lr " + ShortNumber(m.lr) + "  " + Grouped(rate) +
        (text_ ? " tokens/s" : " samples/s") + "  ETA " +
        FormatDuration(step_seconds_ * static_cast<double>(m.total_steps - m.step)) + Scaler(m) +
        Comm(m) + Memory(m);
    Print(line, /*keep=*/!tty_);
  }

  // Tensor memory on the training device (the GPU's, or the process's on the CPU): the most
  // the step had in tensors, and what the caching allocator holds.
  static std::string Memory(const trainer::StepMetrics& m) {
    return "  memory " + Bytes(m.memory.peak_allocated_bytes) + " peak, " +
           Bytes(m.memory.reserved_bytes) + " reserved";
  }

  // precision fp16: the loss scale and how many steps this run skipped for inf/NaN gradients.
  std::string Scaler(const trainer::StepMetrics& m) const {
    if (m.loss_scale <= 0) return "";
    char scale[32];
    std::snprintf(scale, sizeof(scale), "%.6g", m.loss_scale);
    return "  loss scale " + std::string(scale) +
           (skipped_ > 0 ? " (" + std::to_string(skipped_) + " steps skipped)" : "");
  }

  // With pipeline stages, the part of the step rank 0's stage waited for the others. This
  // step's gradient all-reduce on rank 0: running time, the part backward did not hide, and
  // bus bandwidth (none for a stage without replicas). Empty for one process.
  static std::string Comm(const trainer::StepMetrics& m) {
    if (m.world_size <= 1) return "";
    const bool pipeline = m.pipeline_bubble > 0;
    const std::string bubble =
        pipeline ? "  bubble " + Fixed(100 * m.pipeline_bubble, 0) + "%" : std::string();
    if (pipeline && m.allreduce_seconds == 0) return bubble;
    return bubble + "  all-reduce " + Fixed(1e3 * m.allreduce_seconds, 1) + " ms (waited " +
           Fixed(1e3 * m.bucket_wait_seconds, 1) + " ms, " + Fixed(m.bus_bandwidth / 1e9, 2) +
           " GB/s)";
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
  int64_t steps_ = 0;                            // steps seen
  int64_t skipped_ = 0;                          // of them, skipped by the loss scaler
  int64_t units_ = 0;                            // samples (tokens for text) after the first step
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
      {"world_size", s.world_size},
      {"optimizer_state_bytes", s.optimizer_state_bytes},
      {"weight_bytes", s.weight_bytes},
      {"gradient_bytes", s.gradient_bytes},
      {"peak_resident_bytes", s.peak_resident_bytes},
      {"skipped_steps", s.skipped_steps},
  });
}

void PrintSummary(const trainer::TrainSummary& s, bool text) {
  std::string out =
      s.name + ": " + (s.interrupted ? "stopped at step " : "") + std::to_string(s.steps) +
      (s.interrupted ? " of " + std::to_string(s.total_steps) : " steps") + " (" +
      std::to_string(s.steps_this_run) + " in this run) in " + FormatDuration(s.seconds) + ", " +
      Grouped(text ? s.tokens_per_second : s.samples_per_second) +
      (text ? " tokens/s\n" : " samples/s\n");
  out += "  train loss   " + Fixed(s.final_train_loss, 4) + " (mean of the last 50 steps)\n";
  if (s.skipped_steps > 0) {
    out += "  skipped      " + std::to_string(s.skipped_steps) +
           " steps (fp16 gradients overflowed; the loss scale was lowered)\n";
  }
  if (s.eval) {
    out += "  eval         loss " + Fixed(s.eval->loss, 4) + ", accuracy " +
           Fixed(100 * s.eval->accuracy, 2) + "% on " +
           Grouped(static_cast<double>(s.eval->samples)) + (text ? " windows\n" : " samples\n");
  }
  const auto mib = [](int64_t bytes) {
    return Fixed(static_cast<double>(bytes) / (1 << 20), 2) + " MiB";
  };
  out += "  memory       " +
         std::string(s.world_size > 1 ? "rank 0 of " + std::to_string(s.world_size) + ": " : "") +
         "weights " + mib(s.weight_bytes) + ", gradients " + mib(s.gradient_bytes) +
         ", optimizer state " + mib(s.optimizer_state_bytes) + "; peak resident " +
         mib(s.peak_resident_bytes) + "\n";
  if (!s.resumed_from.empty()) out += "  resumed from " + s.resumed_from + "\n";
  if (!s.checkpoint.empty()) out += "  checkpoint   " + s.checkpoint + "\n";
  std::fputs(out.c_str(), stdout);
}

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "trainyard: error: %s\n", message.c_str());
  return code;
}

// The command line, parsed.
struct TrainArgs {
  std::string spec_path;
  std::vector<std::string> overrides;
  bool json = false, quiet = false;
  bool fresh = false;                  // --fresh: the launcher moves checkpoint.dir aside
  std::string metrics_file;            // --metrics-file
  std::optional<std::string> nproc;    // --nproc's value, when given
  std::vector<std::string> rank_args;  // "train" and the arguments, without --nproc
};

// Returns the exit code when the command ends here (--help, bad usage), else -1.
int ParseArgs(const std::vector<std::string>& args, TrainArgs* out) {
  out->rank_args = {"train"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--nproc" || a.rfind("--nproc=", 0) == 0) {
      if (a == "--nproc" && i + 1 >= args.size()) {
        return Fail("--nproc takes a number\n" + std::string(kUsage), 2);
      }
      out->nproc = a == "--nproc" ? args[++i] : a.substr(8);
      continue;
    }
    if (a == "--fresh") {  // done once, by the launcher: not passed to ranks
      out->fresh = true;
      continue;
    }
    out->rank_args.push_back(a);
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-o" || a == "--output") {
      if (i + 1 >= args.size() || (args[i + 1] != "json" && args[i + 1] != "text")) {
        return Fail(a + " takes json or text\n" + kUsage, 2);
      }
      out->rank_args.push_back(args[i + 1]);
      out->json = args[++i] == "json";
    } else if (a == "--set") {
      if (i + 1 >= args.size()) return Fail("--set takes path=value\n" + std::string(kUsage), 2);
      out->rank_args.push_back(args[i + 1]);
      out->overrides.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      out->overrides.push_back(a.substr(6));
    } else if (a == "--metrics-file") {
      if (i + 1 >= args.size())
        return Fail("--metrics-file takes a path\n" + std::string(kUsage), 2);
      out->rank_args.push_back(args[i + 1]);
      out->metrics_file = args[++i];
    } else if (a == "--resume-from") {
      if (i + 1 >= args.size())
        return Fail("--resume-from takes a checkpoint step directory\n" + std::string(kUsage), 2);
      out->rank_args.push_back(args[i + 1]);
      out->overrides.push_back("checkpoint.resume_from=" + args[++i]);
    } else if (a == "--quiet" || a == "-q") {
      out->quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      return Fail("unknown option " + a + "\n" + kUsage, 2);
    } else if (out->spec_path.empty()) {
      out->spec_path = a;
    } else {
      return Fail("one spec file, got " + out->spec_path + " and " + a + "\n" + kUsage, 2);
    }
  }
  if (out->spec_path.empty()) return Fail(std::string("no spec file given\n") + kUsage, 2);
  return -1;
}

// How many processes to run: --nproc, else parallelism.world_size (which must agree with
// --nproc when the spec sets it). InvalidArgument naming both when they differ.
StatusOr<int> ResolveNproc(const TrainArgs& a, const spec::JobSpec& spec, bool sets_world_size) {
  const int world_size = spec.parallelism.world_size;
  int nproc = world_size;
  if (a.nproc) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(a.nproc->c_str(), &end, 10);
    if (a.nproc->empty() || *end != '\0' || errno != 0 || n < 1 || n > spec::kMaxWorldSize) {
      return InvalidArgumentError("--nproc \"" + *a.nproc +
                                  "\": must be a number of processes in [1, " +
                                  std::to_string(spec::kMaxWorldSize) + "]");
    }
    nproc = static_cast<int>(n);
    if (sets_world_size && nproc != world_size) {
      return InvalidArgumentError("--nproc " + std::to_string(nproc) +
                                  " and parallelism.world_size = " + std::to_string(world_size) +
                                  " in " + a.spec_path +
                                  " differ; give one of them, or the same number");
    }
  }
  const int per_node = spec.parallelism.ranks_per_node;
  if (nproc > 1 && per_node != 0 && per_node != nproc) {
    return InvalidArgumentError("parallelism.ranks_per_node = " + std::to_string(per_node) +
                                ": a local launch starts all " + std::to_string(nproc) +
                                " ranks on this node; set it to 0 or " + std::to_string(nproc));
  }
  return nproc;
}

// In a launched rank: the store the launcher serves, scoped to this run, and the group.
StatusOr<std::shared_ptr<dist::ProcessGroup>> JoinGroup(const ranks::LocalRankEnv& env,
                                                        const spec::JobSpec& spec,
                                                        dist::PipelineGroups* pipeline) {
  const auto timeout =
      std::chrono::milliseconds(std::llround(spec.parallelism.collective_timeout_seconds * 1000));
  StatusOr<std::shared_ptr<dist::Store>> store = dist::TcpStore::Connect(env.store, timeout);
  if (!store.ok()) {
    return Status(store.status().code(), "connecting to the launcher's store " + env.store + " (" +
                                             ranks::kStoreEnv + "): " + store.status().message());
  }
  auto scoped = std::make_shared<dist::PrefixStore>("run/" + env.run_id + "/", *store);
  return ranks::JoinGroup(spec, std::move(scoped), env.rank, env.world_size, /*hostname=*/"",
                          pipeline);
}

// A rerun of a run that finished: nothing to train. Says so (the summary's already_complete
// with -o json) and exits 0.
int AlreadyComplete(const TrainArgs& a, const trainer::Trainer& t, const spec::JobSpec& spec,
                    bool rank0) {
  if (!rank0) return 0;
  if (a.json) {
    trainer::TrainSummary s;
    s.name = spec.name;
    s.steps = t.step();
    s.total_steps = t.total_steps();
    s.final_train_loss = std::nan("");
    s.checkpoint = s.resumed_from = t.resumed_from();
    s.world_size = spec.parallelism.world_size;
    Json out = SummaryJson(s);
    out.Set("already_complete", true);
    std::printf("%s\n", out.Dump().c_str());
  } else {
    std::fprintf(stderr,
                 "trainyard: %s is already complete: %s is at step %lld of %lld; nothing to train "
                 "(--set steps=N to train longer, --fresh to train again from step 0)\n",
                 spec.name.c_str(), t.resumed_from().c_str(), static_cast<long long>(t.step()),
                 static_cast<long long>(t.total_steps()));
  }
  std::fflush(stdout);
  return 0;
}

// Trainer::Run, with SIGINT and SIGTERM asking it to stop (OnSignal).
StatusOr<trainer::TrainSummary> RunStoppably(trainer::Trainer& trainer) {
  ScopedStopSignals signals(OnSignal);
  return trainer.Run();
}

// Trains in this process; `group` is null for a single process.
int Train(const TrainArgs& a, const spec::JobSpec& spec, std::shared_ptr<dist::ProcessGroup> group,
          dist::PipelineGroups pipeline = {}) {
  const bool text = spec.data.source == "text" || spec.data.source == "tokens";
  Progress progress(a.quiet, text);
  trainer::TrainerOptions options;
  options.stop = &g_stop;
  options.on_step = [&](const trainer::StepMetrics& m) { progress.Step(m); };
  options.on_eval = [&](const trainer::EvalMetrics& m) { progress.Eval(m); };
  options.on_checkpoint = [&](const std::string& dir, int64_t) {
    progress.Note("checkpoint " + dir);
  };
  const bool rank0 = group == nullptr || group->rank() == 0;
  options.process_group = std::move(group);
  options.pipeline = std::move(pipeline);
  options.metrics_file = a.metrics_file;

  StatusOr<std::unique_ptr<trainer::Trainer>> trainer = trainer::Trainer::Create(spec, options);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()), 1);
  const trainer::Trainer& t = **trainer;
  const int ranks = spec.parallelism.world_size;
  std::string flops;
  if (std::optional<spec::GraphSpec> graph = spec::ModelGraph(spec.model, t.data().num_classes)) {
    StatusOr<spec::CompiledGraph> g = spec::CompileGraph(*graph);
    if (g.ok()) flops = ", " + FlopsPerSample(*g);
  }
  progress.Note(spec.name + ": " + spec.model.arch + " (" +
                Grouped(static_cast<double>(t.num_parameters())) + " parameters" + flops + ") on " +
                t.data().description + "; " + std::to_string(t.total_steps()) + " steps of " +
                std::to_string(spec.batch_size) +
                (ranks > 1 ? " x " + std::to_string(ranks) + " ranks" : "") + ", " +
                std::to_string(kernels::cpu::GetNumThreads()) + " threads");
  if (!t.resumed_from().empty()) {
    progress.Note("resuming from " + t.resumed_from() + " at step " + std::to_string(t.step()));
  }
  if (!t.resume_note().empty()) progress.Note("note: " + t.resume_note());
  if (t.step() >= t.total_steps()) return AlreadyComplete(a, t, spec, rank0);

  StatusOr<trainer::TrainSummary> summary = RunStoppably(**trainer);
  progress.Close();
  if (!summary.ok()) return Fail(std::string(summary.status().message()), 1);

  if (a.json) {
    std::printf("%s\n", SummaryJson(*summary).Dump().c_str());
  } else {
    PrintSummary(*summary, text);
  }
  std::fflush(stdout);
  if (summary->interrupted) return 128 + (g_signal.load() ? g_signal.load() : SIGINT);
  return 0;
}

// One rank of a launched run (TRAINYARD_RANK is set).
int TrainRank(const TrainArgs& a, const ranks::LocalRankEnv& env, spec::JobSpec spec,
              bool sets_world_size) {
  if (a.nproc) {
    return Fail(std::string("--nproc starts ranks; this process is one (") + ranks::kRankEnv +
                    " = " + std::to_string(env.rank) + ")",
                2);
  }
  if (sets_world_size && spec.parallelism.world_size != env.world_size) {
    return Fail("parallelism.world_size = " + std::to_string(spec.parallelism.world_size) + " in " +
                    a.spec_path + ", but " + ranks::kWorldSizeEnv + " = " +
                    std::to_string(env.world_size),
                2);
  }
  spec.parallelism.world_size = env.world_size;
  dist::PipelineGroups pipeline;
  StatusOr<std::shared_ptr<dist::ProcessGroup>> group = JoinGroup(env, spec, &pipeline);
  if (!group.ok()) {
    return Fail("rank " + std::to_string(env.rank) + ": " + std::string(group.status().message()),
                1);
  }
  return Train(a, spec, std::move(*group), std::move(pipeline));
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) {
  TrainArgs a;
  if (int code = ParseArgs(args, &a); code >= 0) return code;
  StatusOr<std::optional<ranks::LocalRankEnv>> rank = ranks::ReadLocalRankEnv();
  if (!rank.ok()) return Fail(std::string(rank.status().message()), 2);
  StatusOr<Json> json = LoadSpecJson(a.spec_path, a.overrides);
  if (!json.ok()) return Fail(std::string(json.status().message()), 2);
  const bool sets_world_size = SetsField(*json, "parallelism.world_size");
  // The launch's world size is the spec's before its rules relate it to other fields (such as
  // pipeline_stages): a rank's, or a valid --nproc (ResolveNproc names a bad one).
  const std::string launched =
      rank->has_value() ? std::to_string((*rank)->world_size) : a.nproc.value_or("");
  const bool valid = !launched.empty() && launched.size() < 6 &&
                     launched.find_first_not_of("0123456789") == std::string::npos &&
                     std::stoi(launched) >= 1 && std::stoi(launched) <= spec::kMaxWorldSize;
  if (!sets_world_size && valid) {
    if (Status s = ApplyOverride("parallelism.world_size=" + launched, &*json); !s.ok())
      return Fail(std::string(s.message()), 2);
  }
  StatusOr<spec::JobSpec> spec = ParseSpecJson(a.spec_path, *json);
  if (!spec.ok()) return Fail(std::string(spec.status().message()), 2);
  if (rank->has_value()) return TrainRank(a, **rank, *std::move(spec), sets_world_size);

  StatusOr<int> nproc = ResolveNproc(a, *spec, sets_world_size);
  if (!nproc.ok()) return Fail(std::string(nproc.status().message()) + "\n" + kUsage, 2);
  if (Status s = CheckMemory(*spec, *nproc); !s.ok()) return Fail(std::string(s.message()), 2);
  if (a.fresh) {
    if (Status s = MoveAside(spec->checkpoint.dir); !s.ok())
      return Fail(std::string(s.message()), 1);
  }
  if (*nproc == 1) return Train(a, *spec, nullptr);
  LaunchOptions launch;
  launch.nproc = *nproc;
  launch.args = a.rank_args;
  launch.grace =
      std::chrono::milliseconds(std::llround(spec->parallelism.collective_timeout_seconds * 1000)) +
      std::chrono::seconds(5);
  launch.quiet = a.quiet;
  return Launch(launch);
}

}  // namespace trainyard::client
