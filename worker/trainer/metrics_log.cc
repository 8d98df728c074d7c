#include "worker/trainer/metrics_log.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/durable_file.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status Errno(const std::string& what) {
  return UnavailableError(what + ": " + std::strerror(errno));
}

// The lines of `path` to keep: whole JSON objects with a step <= keep_through_step. `dropped`:
// whether any line was left out.
std::string KeptLines(const std::string& path, int64_t keep_through_step, bool* dropped) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    StatusOr<Json> j = Json::Parse(line);
    const Json* step = j.ok() && j->is_object() ? j->Find("step") : nullptr;
    if (step != nullptr && step->is_integer() && step->int_value() <= keep_through_step) {
      kept += line + "\n";
    } else {
      *dropped = true;
    }
  }
  return kept;
}

}  // namespace

StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(const std::string& path,
                                                       int64_t keep_through_step) {
  bool dropped = false;
  const std::string kept =
      keep_through_step > 0 ? KeptLines(path, keep_through_step, &dropped) : "";
  if (keep_through_step <= 0 || dropped) {
    Status s = WriteFileAtomically(path, kept);
    if (!s.ok()) return s.WithContext("the metrics file");
  }
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return Errno("cannot open the metrics file " + path);
  return std::unique_ptr<MetricsLog>(new MetricsLog(path, f));
}

MetricsLog::~MetricsLog() { std::fclose(file_); }

Json StepMetricsJson(const StepMetrics& m) {
  return Json::Object({{"type", "step"},
                       {"step", m.step},
                       {"total_steps", m.total_steps},
                       {"epoch", m.epoch},
                       {"loss", Number(m.loss)},
                       {"lr", Number(m.lr)},
                       {"grad_norm", Number(m.grad_norm)},
                       {"samples", m.samples},
                       {"tokens", m.tokens},
                       {"samples_per_second", Number(m.samples_per_second)},
                       {"tokens_per_second", Number(m.tokens_per_second)},
                       {"data_seconds", Number(m.data_seconds)},
                       {"forward_seconds", Number(m.forward_seconds)},
                       {"backward_seconds", Number(m.backward_seconds - m.bucket_wait_seconds)},
                       {"allreduce_wait_seconds", Number(m.bucket_wait_seconds)},
                       {"optimizer_seconds", Number(m.optimizer_seconds)},
                       {"allreduce_seconds", Number(m.allreduce_seconds)},
                       {"allreduce_bus_bandwidth", Number(m.bus_bandwidth)},
                       {"loss_scale", Number(m.loss_scale)},
                       {"skipped", m.skipped},
                       {"pipeline_bubble", Number(m.pipeline_bubble)},
                       {"memory_allocated_bytes", m.memory.allocated_bytes},
                       {"memory_reserved_bytes", m.memory.reserved_bytes},
                       {"memory_peak_bytes", m.memory.peak_allocated_bytes}});
}

Json EvalMetricsJson(const EvalMetrics& m) {
  return Json::Object({{"type", "eval"},
                       {"step", m.step},
                       {"loss", Number(m.loss)},
                       {"accuracy", Number(m.accuracy)},
                       {"samples", m.samples},
                       {"seconds", Number(m.seconds)}});
}

Status MetricsLog::Step(const StepMetrics& m) { return Append(StepMetricsJson(m)); }
Status MetricsLog::Eval(const EvalMetrics& m) { return Append(EvalMetricsJson(m)); }

Status MetricsLog::Append(Json line) {
  line.Set("time", Now());
  const std::string text = line.Dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    return Errno("cannot append to the metrics file " + path_);
  }
  return OkStatus();
}

}  // namespace trainyard::trainer
