// `trainyard plot`: metrics files written here, read back and drawn; the SVG is checked by its
// elements (polylines by class, eval markers, the plot area's corners). client_test has no
// path to the trainyard binary, so the command is run through its C++ entry point,
// RunPlotCommand, with stdout and stderr captured.
#include "client/plot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/svg.h"
#include "tests/testing/temp_dir.h"

namespace trainyard::client {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;
using testing::TempDir;
using Polyline = std::vector<std::pair<double, double>>;

std::string StepLine(int step, const std::string& loss, const std::string& lr = "0.01") {
  return R"({"type":"step","step":)" + std::to_string(step) + R"(,"total_steps":100,"loss":)" +
         loss + R"(,"lr":)" + lr + R"(,"grad_norm":null,"skipped":false,"time":1.5})" + "\n";
}

std::string EvalLine(int step, double loss, double accuracy) {
  return R"({"type":"eval","step":)" + std::to_string(step) + R"(,"loss":)" + std::to_string(loss) +
         R"(,"accuracy":)" + std::to_string(accuracy) + R"(,"samples":100})" + "\n";
}

// Writes `text` as dir/metrics.jsonl and returns its path.
std::string WriteMetrics(const TempDir& dir, const std::string& text) {
  std::ofstream(dir.File("metrics.jsonl")) << text;
  return dir.File("metrics.jsonl");
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The points of every <polyline class="css_class">, in pixels.
std::vector<Polyline> Polylines(const std::string& svg, const std::string& css_class) {
  std::vector<Polyline> out;
  const std::string tag = "<polyline class=\"" + css_class + "\"";
  for (size_t at = svg.find(tag); at != std::string::npos; at = svg.find(tag, at + 1)) {
    const size_t begin = svg.find("points=\"", at) + 8;
    std::istringstream points(svg.substr(begin, svg.find('"', begin) - begin));
    out.emplace_back();
    double x, y;
    char comma;
    while (points >> x >> comma >> y) out.back().push_back({x, y});
  }
  return out;
}

// The plot area as {left, top, right, bottom}.
std::vector<double> PlotArea(const std::string& svg) {
  const size_t at = svg.find("<rect class=\"plot-area\"");
  auto attr = [&](const std::string& name) {
    return std::stod(svg.substr(svg.find(" " + name + "=\"", at) + name.size() + 3));
  };
  return {attr("x"), attr("y"), attr("x") + attr("width"), attr("y") + attr("height")};
}

std::string Plot(const std::string& path, const std::string& metric = "loss", bool log_y = false,
                 int* left_out = nullptr) {
  StatusOr<MetricHistory> history = ReadMetricHistory(path, metric);
  EXPECT_TRUE(history.ok()) << history.status();
  if (!history.ok()) return "";
  int ignored = 0;
  StatusOr<std::string> svg =
      PlotSvg(*history, "run: " + metric, log_y, left_out ? left_out : &ignored);
  EXPECT_TRUE(svg.ok()) << svg.status();
  return svg.ok() ? *svg : "";
}

TEST(PlotTest, ASmallRunDrawsEveryStepOnceRawAndOnceSmoothed) {
  TempDir dir;
  std::string text;
  for (int step = 1; step <= 10; ++step) text += StepLine(step, std::to_string(1.0 / step));
  const std::string svg = Plot(WriteMetrics(dir, text));
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_THAT(svg, HasSubstr(">run: loss</text>"));
  EXPECT_THAT(svg, HasSubstr(">step</text>"));
  ASSERT_EQ(Polylines(svg, "raw").size(), 1u);
  EXPECT_EQ(Polylines(svg, "raw")[0].size(), 10u);
  ASSERT_EQ(Polylines(svg, "smooth").size(), 1u);
  EXPECT_EQ(Polylines(svg, "smooth")[0].size(), 10u);
  EXPECT_THAT(svg, HasSubstr(">train</text>"));
  EXPECT_THAT(svg, HasSubstr(">train (smoothed)</text>"));
}

TEST(PlotTest, AFallingLineRunsFromTheTopLeftToTheBottomRightCorner) {
  TempDir dir;
  std::string text;  // loss 1.0 at step 1 down to 0.0 at step 11: the y axis spans exactly 0..1
  for (int step = 1; step <= 11; ++step) text += StepLine(step, std::to_string((11 - step) / 10.0));
  const std::string svg = Plot(WriteMetrics(dir, text));
  const std::vector<double> area = PlotArea(svg);
  const Polyline line = Polylines(svg, "raw").at(0);
  EXPECT_DOUBLE_EQ(line.front().first, area[0]);
  EXPECT_DOUBLE_EQ(line.front().second, area[1]);
  EXPECT_DOUBLE_EQ(line.back().first, area[2]);
  EXPECT_DOUBLE_EQ(line.back().second, area[3]);
  EXPECT_NEAR(line[5].first, (area[0] + area[2]) / 2, 0.05);  // step 6, loss 0.5: the middle
  EXPECT_NEAR(line[5].second, (area[1] + area[3]) / 2, 0.05);
}

TEST(PlotTest, AMillionStepsDrawABoundedNumberOfPointsAndKeepASpike) {
  MetricHistory h;
  h.metric = "loss";
  for (int step = 1; step <= 1000000; ++step) {
    h.steps.push_back(step);
    const bool null = step >= 300000 && step < 310000;  // a gap of about 7 pixels
    h.values.push_back(null ? NAN : step == 500000 ? 10.0 : 1.0 + 0.1 * std::sin(step));
  }
  int left_out = 0;
  StatusOr<std::string> svg = PlotSvg(h, "big: loss", false, &left_out);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_LT(svg->size(), 200000u);
  size_t points = 0;
  double top = 1e9;
  for (const Polyline& line : Polylines(*svg, "raw")) {
    points += line.size();
    for (const auto& p : line) top = std::min(top, p.second);
  }
  EXPECT_GT(points, 700u);
  EXPECT_LE(points, 2000u);
  EXPECT_DOUBLE_EQ(top, PlotArea(*svg)[1]);  // the spike, the axis' maximum, is drawn
  EXPECT_EQ(Polylines(*svg, "raw").size(), 2u);
}

TEST(PlotTest, NullLossesSplitTheLineIntoTwo) {
  TempDir dir;
  const std::string svg =
      Plot(WriteMetrics(dir, StepLine(1, "0.9") + StepLine(2, "0.8") + StepLine(3, "null") +
                                 StepLine(4, "0.6") + StepLine(5, "0.5") + StepLine(6, "0.4")));
  const std::vector<Polyline> raw = Polylines(svg, "raw");
  ASSERT_EQ(raw.size(), 2u);
  EXPECT_EQ(raw[0].size(), 2u);
  EXPECT_EQ(raw[1].size(), 3u);
  EXPECT_EQ(Polylines(svg, "smooth").size(), 2u);
}

TEST(PlotTest, ATornLastLineGarbageAndUnknownLineTypesAreSkipped) {
  TempDir dir;
  const std::string svg = Plot(
      WriteMetrics(dir, StepLine(1, "0.9") + R"({"type":"checkpoint","step":1,"loss":5})" + "\n" +
                            "not json\n" + StepLine(2, "0.8") + R"({"type":"step","step":3,"lo)"));
  ASSERT_EQ(Polylines(svg, "raw").size(), 1u);
  EXPECT_EQ(Polylines(svg, "raw")[0].size(), 2u);
}

TEST(PlotTest, EvalLossesAreMarkersInTheLegend) {
  TempDir dir;
  std::string text;
  for (int step = 1; step <= 30; ++step) {
    text += StepLine(step, std::to_string(2.0 / step));
    if (step % 10 == 0) text += EvalLine(step, 1.0 / step, 0.5);
  }
  const std::string svg = Plot(WriteMetrics(dir, text));
  EXPECT_EQ(Count(svg, "<circle class=\"eval\""), 3u);
  EXPECT_THAT(svg, HasSubstr(">eval</text>"));
}

TEST(PlotTest, AccuracyIsReadFromTheEvalLines) {
  TempDir dir;
  const std::string path = WriteMetrics(
      dir, StepLine(1, "0.9") + EvalLine(1, 0.9, 0.5) + StepLine(2, "0.8") + EvalLine(2, 0.8, 0.7));
  StatusOr<MetricHistory> h = ReadMetricHistory(path, "accuracy");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->from_eval);
  EXPECT_THAT(h->values, ElementsAre(0.5, 0.7));
  const std::string svg = Plot(path, "accuracy");
  EXPECT_EQ(Polylines(svg, "raw").at(0).size(), 2u);
  EXPECT_EQ(Count(svg, "<circle class=\"raw\""), 2u);
}

TEST(PlotTest, UnknownMetricsEmptyFilesAndAllNullMetricsAreClearErrors) {
  TempDir dir;
  const std::string path = WriteMetrics(dir, StepLine(1, "0.9") + StepLine(2, "0.8"));
  StatusOr<MetricHistory> h = ReadMetricHistory(path, "foo");
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("metric \"foo\" is in no line of"));
  EXPECT_THAT(h.status().message(), HasSubstr("total_steps, loss, lr, grad_norm, time"));

  h = ReadMetricHistory(path, "grad_norm");
  EXPECT_THAT(h.status().message(), HasSubstr("metric \"grad_norm\" is null in every line"));

  h = ReadMetricHistory(WriteMetrics(dir, ""), "loss");
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("has no step lines yet"));

  h = ReadMetricHistory(dir.File("missing.jsonl"), "loss");
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(h.status().message(), HasSubstr("no metrics file at"));
}

TEST(PlotTest, LogYLeavesOutValuesAtOrBelowZeroAndLabelsDecades) {
  TempDir dir;
  const std::string path =
      WriteMetrics(dir, StepLine(1, "1", "0") + StepLine(2, "1", "0.001") +
                            StepLine(3, "1", "0.01") + StepLine(4, "1", "0.1"));
  int left_out = 0;
  const std::string svg = Plot(path, "lr", /*log_y=*/true, &left_out);
  EXPECT_EQ(left_out, 1);
  const std::vector<Polyline> raw = Polylines(svg, "raw");
  ASSERT_EQ(raw.size(), 1u);
  ASSERT_EQ(raw[0].size(), 3u);
  // Decades are evenly spaced: 0.001, 0.01 and 0.1 fall on the bottom, middle and top.
  const std::vector<double> area = PlotArea(svg);
  EXPECT_DOUBLE_EQ(raw[0][0].second, area[3]);
  EXPECT_NEAR(raw[0][1].second, (area[1] + area[3]) / 2, 0.05);
  EXPECT_DOUBLE_EQ(raw[0][2].second, area[1]);
  EXPECT_THAT(svg, HasSubstr(">0.001</text>"));
  EXPECT_THAT(svg, HasSubstr(">lr (log scale)</text>"));

  StatusOr<MetricHistory> zeros =
      ReadMetricHistory(WriteMetrics(dir, StepLine(1, "1", "0") + StepLine(2, "1", "-1")), "lr");
  ASSERT_TRUE(zeros.ok());
  StatusOr<std::string> refused = PlotSvg(*zeros, "t", true, &left_out);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--log-y: every value of lr is 0 or less"));
}

TEST(PlotTest, NiceTicksAreMultiplesOfOneTwoOrFiveCoveringTheRange) {
  using V = std::vector<double>;
  EXPECT_THAT(NiceTicks(0, 1, 5), Pointwise(DoubleNear(1e-12), V{0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_THAT(NiceTicks(1, 938, 8), Pointwise(DoubleNear(1e-12), V{0, 200, 400, 600, 800, 1000}));
  EXPECT_THAT(NiceTicks(0.31, 0.47, 5), Pointwise(DoubleNear(1e-12), V{0.3, 0.35, 0.4, 0.45, 0.5}));
  EXPECT_THAT(NiceTicks(-3, 7, 5), Pointwise(DoubleNear(1e-12), V{-4, -2, 0, 2, 4, 6, 8}));
}

TEST(PlotTest, TheCommandWritesBesideTheMetricsFileAndPrintsThePath) {
  TempDir dir;
  WriteMetrics(dir, StepLine(1, "0.9") + StepLine(2, "0.8"));
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunPlotCommand({dir.path()}), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), dir.File("loss.svg") + "\n");
  std::ifstream written(dir.File("loss.svg"));
  std::stringstream svg;
  svg << written.rdbuf();
  EXPECT_EQ(Polylines(svg.str(), "raw").at(0).size(), 2u);
  std::vector<std::string> names;  // and no temporary file is left behind
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ElementsAre("loss.svg", "metrics.jsonl"));

  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunPlotCommand({dir.File("metrics.jsonl"), "--metric", "lr", "-o", dir.File("x.svg")}),
            0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), dir.File("x.svg") + "\n");
  EXPECT_TRUE(std::filesystem::exists(dir.File("x.svg")));
}

TEST(PlotTest, TheCommandExitsTwoOnBadInputAndOneWhenItCannotWrite) {
  TempDir dir;
  WriteMetrics(dir, StepLine(1, "0.9"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunPlotCommand({dir.path(), "--metric", "nope"}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("trainyard: error: metric \"nope\" is in no line of", 0), 0u) << err;
  EXPECT_EQ(Count(err, "\n"), 1u) << err;

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunPlotCommand({dir.File("none")}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("no metrics file at"));

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunPlotCommand({dir.path(), "-o", dir.File("no/such/dir.svg")}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("trainyard: error: "));

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunPlotCommand({}), 2);  // RUN is missing: the usage follows the error
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("usage: trainyard plot RUN"));
}

TEST(PlotTest, RunIsAMetricsFileOrTheDirectoryHoldingOne) {
  TempDir dir;
  EXPECT_EQ(MetricsFilePath(dir.path()), dir.File("metrics.jsonl"));
  EXPECT_EQ(MetricsFilePath(dir.File("other.jsonl")), dir.File("other.jsonl"));
}

}  // namespace
}  // namespace trainyard::client
