// `trainyard plot RUN [-o OUT.svg] [--metric NAME] [--log-y]`: one metric of a run against the
// step, as an SVG file, from the run's per-step metrics file (<checkpoint.dir>/metrics.jsonl).
//
// That file has one JSON object per line: {"type":"step","step":12,"loss":0.53,"lr":0.01,...}
// for each step and {"type":"eval","step":100,"loss":0.44,"accuracy":0.84,...} for each
// evaluation. Any number may be null (a NaN loss is written as null); a line that is not a
// JSON object (the torn last line of a crashed run) or has another type is skipped.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::client {

// One metric of a run, in ascending step order; NaN where the file has null.
struct MetricHistory {
  std::string metric;
  bool from_eval = false;  // the step lines lack the metric; steps/values are eval lines'
  std::vector<double> steps, values;
  std::vector<double> eval_steps, eval_values;  // eval losses, drawn beside "loss"; else empty
};

// Reads `metric` from the metrics file at `path`: from the step lines, or from the eval lines
// when no step line has it (accuracy). Errors, naming the path: NotFound for a missing file;
// InvalidArgument for a file without step or eval lines, a metric in no line (listing the
// step lines' numeric fields), or a metric whose every value is null.
StatusOr<MetricHistory> ReadMetricHistory(const std::string& path, const std::string& metric);

// The plot as SVG text (client/svg.h): the values as a thin line, their exponential moving
// average as a thicker one, and for "loss" the eval losses as dots. With log_y, values <= 0
// are left out and counted in *left_out; InvalidArgument when that leaves none.
StatusOr<std::string> PlotSvg(const MetricHistory& history, const std::string& title, bool log_y,
                              int* left_out);

// RUN as a metrics file path: RUN itself, or RUN/metrics.jsonl when RUN is a directory.
std::string MetricsFilePath(const std::string& run);

// Runs the command on its arguments (those after "plot"): writes the SVG (through a temporary
// file and a rename) and prints its path. Returns 0, 2 for bad usage or input (a missing or
// unusable metrics file, an unknown metric), 1 when the file cannot be written.
int RunPlotCommand(const std::vector<std::string>& args);

}  // namespace trainyard::client
