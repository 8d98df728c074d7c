#include "client/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "client/svg.h"
#include "common/flags.h"
#include "common/json.h"
#include "worker/data/file_io.h"

namespace trainyard::client {
namespace {

namespace fs = std::filesystem;
using Points = std::vector<std::pair<double, double>>;  // (step, value)

constexpr const char* kUsage =
    "usage: trainyard plot RUN [-o OUT.svg] [--metric NAME] [--log-y]\n"
    "\n"
    "Draws one metric of a run against the step as an SVG file and prints the file's path.\n"
    "RUN is a run's metrics file (metrics.jsonl) or the directory holding it (checkpoint.dir).\n"
    "NAME is loss (the training loss, its moving average and the eval losses as dots), any\n"
    "other number of the step lines (lr, grad_norm, samples_per_second, tokens_per_second,\n"
    "data_seconds, forward_seconds, backward_seconds, optimizer_seconds, loss_scale, ...) or\n"
    "accuracy (from the eval lines). A null value (a NaN loss) leaves a gap in the line.\n"
    "\n"
    "flags:";

// The lines of one type ("step" or "eval"): the metric's values and the first line, whose
// fields an unknown metric's error lists.
struct Lines {
  Points points;
  bool has_metric = false;  // some line holds the metric, as a number or null
  std::optional<Json> first;

  void Add(const Json& line, double step, const std::string& metric) {
    const Json* v = line.Find(metric);
    has_metric |= v && (v->is_number() || v->is_null());
    points.push_back({step, v && v->is_number() ? v->number_value() : NAN});
    if (!first) first = line;
  }
  // The fields that hold a number or null, but "step".
  std::string Fields() const {
    std::string out;
    for (const Json::Member& m : first ? first->members() : Json::Members{}) {
      if (m.first != "step" && (m.second.is_number() || m.second.is_null())) {
        out += (out.empty() ? "" : ", ") + m.first;
      }
    }
    return out.empty() ? "none" : out;
  }
};

void SortAndSplit(Points points, std::vector<double>* steps, std::vector<double>* values) {
  std::stable_sort(points.begin(), points.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [step, value] : points) steps->push_back(step), values->push_back(value);
}

// Debiased exponential moving average of the finite values (as TensorBoard smooths), over a
// span of 1/50 of the series so that a curve looks alike however long the run; NaN where the
// value is not finite.
std::vector<double> Smooth(const std::vector<double>& v) {
  const double alpha = 2 / (std::max(1.0, static_cast<double>(v.size()) / 50) + 1);
  std::vector<double> out(v.size(), NAN);
  double sum = 0, weight = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) continue;
    sum = (1 - alpha) * sum + alpha * v[i];
    weight = (1 - alpha) * weight + alpha;
    out[i] = sum / weight;
  }
  return out;
}

// Replaces values <= 0 with NaN; returns how many.
int DropNonPositive(std::vector<double>* values) {
  int n = 0;
  for (double& v : *values) {
    if (v <= 0) v = NAN, ++n;
  }
  return n;
}

std::string Summary(const MetricHistory& h, const std::vector<double>& values) {
  size_t last = values.size();
  while (last > 0 && !std::isfinite(values[last - 1])) --last;
  if (last == 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s %.0f to %.0f; last %s %.4g at step %.0f",
                h.from_eval ? "evals at steps" : "steps", h.steps.front(), h.steps.back(),
                h.metric.c_str(), values[last - 1], h.steps[last - 1]);
  return buf;
}

int Fail(const Status& s, std::optional<int> code = std::nullopt) {
  std::fprintf(stderr, "trainyard: error: %s\n", s.message().c_str());
  if (code) return *code;
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

}  // namespace

StatusOr<MetricHistory> ReadMetricHistory(const std::string& path, const std::string& metric) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return NotFoundError("no metrics file at \"" + path +
                         "\"; a run writes <checkpoint.dir>/metrics.jsonl as it trains");
  }
  std::ifstream in(path);
  if (!in) return ErrnoStatus("opening \"" + path + "\"");
  Lines steps, evals;
  for (std::string text; std::getline(in, text);) {
    StatusOr<Json> line = Json::Parse(text);
    if (!line.ok() || !line->is_object()) continue;  // torn by a crash
    const Json* type = line->Find("type");
    const Json* step = line->Find("step");
    if (!type || !type->is_string() || !step || !step->is_number()) continue;
    if (type->string_value() == "step") steps.Add(*line, step->number_value(), metric);
    if (type->string_value() == "eval") evals.Add(*line, step->number_value(), metric);
  }
  if (steps.points.empty()) {
    return InvalidArgumentError("\"" + path +
                                "\" has no step lines yet; a run writes one per step");
  }
  if (!steps.has_metric && !evals.has_metric) {
    return InvalidArgumentError("metric \"" + metric + "\" is in no line of \"" + path +
                                "\"; the step lines have: " + steps.Fields() +
                                "; the eval lines: " + evals.Fields());
  }
  MetricHistory h;
  h.metric = metric;
  h.from_eval = !steps.has_metric;
  SortAndSplit(h.from_eval ? evals.points : steps.points, &h.steps, &h.values);
  if (metric == "loss" && !h.from_eval) SortAndSplit(evals.points, &h.eval_steps, &h.eval_values);
  if (std::none_of(h.values.begin(), h.values.end(), [](double v) { return std::isfinite(v); })) {
    return InvalidArgumentError("metric \"" + metric + "\" is null in every line of \"" + path +
                                "\"; nothing to plot");
  }
  return h;
}

StatusOr<std::string> PlotSvg(const MetricHistory& h, const std::string& title, bool log_y,
                              int* left_out) {
  std::vector<double> values = h.values, eval_values = h.eval_values;
  *left_out = log_y ? DropNonPositive(&values) + DropNonPositive(&eval_values) : 0;
  if (std::none_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); })) {
    return InvalidArgumentError("--log-y: every value of " + h.metric +
                                " is 0 or less; plot it without --log-y");
  }
  const std::string name = h.metric == "loss" ? "train" : h.metric;
  Chart chart{title, Summary(h, values), "step", h.metric, log_y, {}};
  if (h.from_eval) {
    chart.series.push_back({"eval", "raw", "#d62728", 1.5, 1, true, h.steps, values});
  } else {
    chart.series.push_back({name, "raw", "#1f77b4", 1, 0.4, false, h.steps, values});
    chart.series.push_back(
        {name + " (smoothed)", "smooth", "#1f77b4", 2.5, 1, false, h.steps, Smooth(values)});
  }
  if (!h.eval_steps.empty()) {
    chart.series.push_back({"eval", "eval", "#d62728", 0, 1, true, h.eval_steps, eval_values});
  }
  return RenderChart(chart);
}

std::string MetricsFilePath(const std::string& run) {
  std::error_code ec;
  return fs::is_directory(run, ec) ? (fs::path(run) / "metrics.jsonl").string() : run;
}

int RunPlotCommand(const std::vector<std::string>& args) {
  Flags f(kUsage);
  f.Value("output", "", "-o: the SVG file to write (default: NAME.svg beside the metrics file)")
      .Alias("-o", "output")
      .Value("metric", "loss", "the metric to plot")
      .Switch("log-y", "a log scale on the y axis; values <= 0 are left out, with a note");
  if (std::optional<int> end = f.ParseOrExit(args, "trainyard", 1)) return *end;
  const std::string path = MetricsFilePath(f.positional()[0]);
  const std::string& metric = f.Get("metric");
  StatusOr<MetricHistory> history = ReadMetricHistory(path, metric);
  if (!history.ok()) return Fail(history.status());
  std::error_code ec;
  const fs::path file = fs::absolute(path, ec).lexically_normal();
  int left_out = 0;
  StatusOr<std::string> svg = PlotSvg(
      *history, file.parent_path().filename().string() + ": " + metric, f.On("log-y"), &left_out);
  if (!svg.ok()) return Fail(svg.status());
  if (left_out > 0) {
    std::fprintf(stderr, "trainyard: note: --log-y left out %d value%s of %s at or below 0\n",
                 left_out, left_out == 1 ? "" : "s", metric.c_str());
  }
  const std::string out = !f.Get("output").empty()
                              ? f.Get("output")
                              : (fs::path(path).parent_path() / (metric + ".svg")).string();
  if (Status s = data::WriteFileBytes(out, *svg); !s.ok()) return Fail(s, 1);
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace trainyard::client
