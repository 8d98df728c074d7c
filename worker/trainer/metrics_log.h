// <checkpoint.dir>/metrics.jsonl: the run's per-step history, one JSON object per line, written
// by rank 0 as it trains (`trainyard plot` draws it; any JSON-lines reader reads it):
//
//   {"type":"step","step":12,"total_steps":938,"epoch":0,"loss":0.53,"lr":0.01,
//    "grad_norm":null,"samples":64,"tokens":64,"samples_per_second":5120.5,
//    "tokens_per_second":5120.5,"data_seconds":0.001,"forward_seconds":0.004,
//    "backward_seconds":0.006,"allreduce_wait_seconds":0,"optimizer_seconds":0.001,
//    "allreduce_seconds":0,"allreduce_bus_bandwidth":0,"loss_scale":0,"skipped":false,
//    "pipeline_bubble":0,"memory_allocated_bytes":81920,"memory_reserved_bytes":131072,
//    "memory_peak_bytes":98304,"time":1764970000.25}
//   {"type":"eval","step":100,"loss":0.44,"accuracy":0.84,"samples":10000,"seconds":1.2,
//    "time":1764970003.5}
//
// Numbers that are not finite (a NaN loss, grad_norm without clipping) are null; time is Unix
// seconds. A resumed run keeps the lines its checkpoint covers (step <= the checkpoint's step)
// and drops the later ones (steps taken after the checkpoint, which it trains again), so the
// file is one continuous history; a run from step 0 starts it empty. Lines are appended whole
// with one write each, without fsync: a crash loses at most the last lines, and a torn last
// line is dropped at the next open.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "common/json.h"
#include "common/status.h"

namespace trainyard::trainer {

struct StepMetrics;
struct EvalMetrics;

inline constexpr const char* kMetricsFile = "metrics.jsonl";

// One step as JSON, as metrics.jsonl holds it (without "time") and as a rank reports it to its
// worker daemon: the phases split the step's wall time, so backward_seconds leaves out the wait
// for gradient buckets (allreduce_wait_seconds). Numbers that are not finite are null.
Json StepMetricsJson(const StepMetrics& m);
// One evaluation as JSON, likewise.
Json EvalMetricsJson(const EvalMetrics& m);

class MetricsLog {
 public:
  // Opens `path` for appending after keeping the lines of steps <= keep_through_step (0: none;
  // rewritten through a temporary file and a rename when any is dropped). Errors name the path.
  static StatusOr<std::unique_ptr<MetricsLog>> Open(const std::string& path,
                                                    int64_t keep_through_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends StepMetricsJson(m) / EvalMetricsJson(m) with "time".
  Status Step(const StepMetrics& m);
  Status Eval(const EvalMetrics& m);

 private:
  MetricsLog(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  Status Append(Json line);

  std::string path_;
  std::FILE* file_;
};

}  // namespace trainyard::trainer
