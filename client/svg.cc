#include "client/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace trainyard::client {
namespace {

// The canvas and the plot area inside it, in pixels (y grows downwards).
constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 72, kRight = 776, kTop = 56, kBottom = 432;

struct Point {
  double x, y;
};

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;

  double Fraction(double v) const {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
  double X(double v) const { return kLeft + Fraction(v) * (kRight - kLeft); }
  double Y(double v) const { return kBottom - Fraction(v) * (kBottom - kTop); }
};

bool Drawable(double y, bool log) { return std::isfinite(y) && (!log || y > 0); }

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c == '&'   ? "&amp;"
           : c == '<' ? "&lt;"
           : c == '>' ? "&gt;"
           : c == '"' ? "&quot;"
                      : std::string(1, c);
  }
  return out;
}

// 0.2 -> "0.2", 250000 -> "250k", 1500000 -> "1.5M": as many decimals as `step` needs;
// "%g" (1e-05, 1e+15) below 0.001 and from 10^12.
std::string TickLabel(double v, double step) {
  if (std::fabs(v) < step * 1e-9) return "0";
  const double a = std::fabs(v);
  const double scale = a >= 1e9 ? 1e9 : a >= 1e6 ? 1e6 : a >= 1e4 ? 1e3 : 1;
  const char* suffix = scale == 1e9 ? "G" : scale == 1e6 ? "M" : scale == 1e3 ? "k" : "";
  char buf[48];
  if (a < 1e-3 || a >= 1e12) {
    std::snprintf(buf, sizeof(buf), "%g", v);
  } else {
    const int decimals =
        std::max(0, -static_cast<int>(std::floor(std::log10(step / scale) + 1e-9)));
    std::snprintf(buf, sizeof(buf), "%.*f%s", decimals, v / scale, suffix);
  }
  return buf;
}

// Decades from the one at or below lo to the one at or above hi (at most about 8 of them
// labelled), with 2 and 5 x 10^k between them when the axis spans two decades or less.
std::vector<double> LogTicks(double lo, double hi) {
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int e1 = std::max(e0 + 1, static_cast<int>(std::ceil(std::log10(hi) - 1e-9)));
  const int every = (e1 - e0 + 7) / 8;
  e1 = e0 + (e1 - e0 + every - 1) / every * every;
  std::vector<double> ticks;
  for (int e = e0; e <= e1; e += every) {
    ticks.push_back(std::pow(10.0, e));
    if (e1 - e0 <= 2 && e < e1)
      ticks.insert(ticks.end(), {2 * std::pow(10.0, e), 5 * std::pow(10.0, e)});
  }
  return ticks;
}

Axis XAxis(const Chart& chart) {
  Axis a;
  a.lo = INFINITY, a.hi = -INFINITY;
  for (const ChartSeries& s : chart.series) {
    for (double x : s.x) {
      if (std::isfinite(x)) a.lo = std::min(a.lo, x), a.hi = std::max(a.hi, x);
    }
  }
  if (a.lo > a.hi) a.lo = 0, a.hi = 1;
  if (a.lo == a.hi) a.lo -= 1, a.hi += 1;
  // Steps are whole numbers: no more intervals than the range has steps.
  for (double t : NiceTicks(a.lo, a.hi, static_cast<int>(std::min(8.0, a.hi - a.lo)))) {
    if (t >= a.lo - 1e-9 * (a.hi - a.lo) && t <= a.hi + 1e-9 * (a.hi - a.lo)) a.ticks.push_back(t);
  }
  return a;
}

Axis YAxis(const Chart& chart) {
  Axis a;
  a.lo = INFINITY, a.hi = -INFINITY, a.log = chart.log_y;
  for (const ChartSeries& s : chart.series) {
    for (size_t i = 0; i < s.y.size(); ++i) {
      if (Drawable(s.y[i], a.log)) a.lo = std::min(a.lo, s.y[i]), a.hi = std::max(a.hi, s.y[i]);
    }
  }
  if (a.lo > a.hi) a.lo = a.log ? 1 : 0, a.hi = a.log ? 10 : 1;
  if (a.lo == a.hi && !a.log) {
    const double pad = a.lo == 0 ? 1 : std::fabs(a.lo) / 10;
    a.lo -= pad, a.hi += pad;
  }
  a.ticks = a.log ? LogTicks(a.lo, a.hi) : NiceTicks(a.lo, a.hi, 5);
  a.lo = a.ticks.front(), a.hi = a.ticks.back();
  return a;
}

// The series' runs of drawable points, in pixels, thinned as RenderChart says. Without
// thinning every point is a column of its own.
std::vector<std::vector<Point>> Pieces(const ChartSeries& s, const Axis& ax, const Axis& ay) {
  const bool thin = s.x.size() > 2 * static_cast<size_t>(kRight - kLeft);
  std::vector<std::vector<Point>> pieces(1);
  auto split = [&] {
    if (!pieces.back().empty()) pieces.emplace_back();
  };
  auto push = [&](size_t i) { pieces.back().push_back({ax.X(s.x[i]), ay.Y(s.y[i])}); };
  // The column being read: its first smallest and largest y, and gaps before its first point
  // and after its last (one between two points is narrower than a pixel).
  size_t lo = 0, hi = 0;
  bool any = false, gap_before = false, gap_after = false;
  long column = -1;
  auto flush = [&] {
    if (gap_before) split();
    if (any) push(std::min(lo, hi));
    if (any && lo != hi) push(std::max(lo, hi));
    if (gap_after) split();
    any = gap_before = gap_after = false;
  };
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !Drawable(s.y[i], ay.log)) {
      (any ? gap_after : gap_before) = true;
      continue;
    }
    const long c = thin ? static_cast<long>(ax.X(s.x[i]) - kLeft) : static_cast<long>(i);
    if (c != column) flush(), column = c;
    if (!any || s.y[i] < s.y[lo]) lo = i;
    if (!any || s.y[i] > s.y[hi]) hi = i;
    any = true;
    gap_after = false;
  }
  flush();
  if (pieces.back().empty()) pieces.pop_back();
  return pieces;
}

std::string Circle(const Point& p, double r, const std::string& css_class, const ChartSeries& s) {
  return "<circle class=\"" + css_class + "\" cx=\"" + Num(p.x) + "\" cy=\"" + Num(p.y) +
         "\" r=\"" + Num(r) + "\" fill=\"" + s.color + "\" fill-opacity=\"" + Num(s.opacity) +
         "\"/>\n";
}

void DrawSeries(const ChartSeries& s, const Axis& ax, const Axis& ay, std::string* out) {
  for (const std::vector<Point>& piece : Pieces(s, ax, ay)) {
    if (s.line_width > 0 && piece.size() == 1)
      *out += Circle(piece[0], s.line_width, s.css_class, s);
    if (s.line_width > 0 && piece.size() > 1) {
      *out += "<polyline class=\"" + s.css_class + "\" fill=\"none\" stroke=\"" + s.color +
              "\" stroke-width=\"" + Num(s.line_width) + "\" stroke-opacity=\"" + Num(s.opacity) +
              "\" stroke-linejoin=\"round\" points=\"";
      for (const Point& p : piece) *out += Num(p.x) + "," + Num(p.y) + " ";
      out->back() = '"';
      *out += "/>\n";
    }
    if (s.markers) {
      for (const Point& p : piece) *out += Circle(p, 3, s.css_class, s);
    }
  }
}

std::string Text(double x, double y, const std::string& anchor, const std::string& text,
                 const std::string& extra = "") {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" text-anchor=\"" + anchor + "\"" + extra +
         ">" + Escape(text) + "</text>\n";
}

// Title, grid, tick labels, axis labels and the plot area's border.
void DrawFrame(const Chart& chart, const Axis& ax, const Axis& ay, std::string* out) {
  *out += Text(kWidth / 2, 22, "middle", chart.title, " font-size=\"15\" font-weight=\"bold\"");
  *out += Text(kWidth / 2, 40, "middle", chart.subtitle, " fill=\"#666\"");
  std::string grid;
  const double x_step = ax.ticks.size() > 1 ? ax.ticks[1] - ax.ticks[0] : 1;
  for (double t : ax.ticks) {
    grid += "M" + Num(ax.X(t)) + " " + Num(kTop) + "V" + Num(kBottom);
    *out += Text(ax.X(t), kBottom + 16, "middle", TickLabel(t, x_step));
  }
  for (double t : ay.ticks) {
    grid += "M" + Num(kLeft) + " " + Num(ay.Y(t)) + "H" + Num(kRight);
    const double step = ay.log ? t : ay.ticks[1] - ay.ticks[0];
    *out += Text(kLeft - 6, ay.Y(t) + 4, "end", TickLabel(t, step));
  }
  *out += "<path class=\"grid\" stroke=\"#e3e3e3\" d=\"" + grid + "\"/>\n";
  *out += "<rect class=\"plot-area\" x=\"" + Num(kLeft) + "\" y=\"" + Num(kTop) + "\" width=\"" +
          Num(kRight - kLeft) + "\" height=\"" + Num(kBottom - kTop) +
          "\" fill=\"none\" stroke=\"#888\"/>\n";
  *out += Text((kLeft + kRight) / 2, kHeight - 10, "middle", chart.x_label);
  *out += Text(0, 0, "middle", chart.y_label + (ay.log ? " (log scale)" : ""),
               " transform=\"translate(16," + Num((kTop + kBottom) / 2) + ") rotate(-90)\"");
}

// The named series in a box at the plot area's right, at the top unless the first series
// ends in the upper half (about 7 pixels per character).
void DrawLegend(const Chart& chart, const Axis& ay, std::string* out) {
  std::vector<const ChartSeries*> named;
  size_t chars = 0;
  for (const ChartSeries& s : chart.series) {
    if (!s.name.empty()) named.push_back(&s), chars = std::max(chars, s.name.size());
  }
  if (named.empty()) return;
  const ChartSeries& first = chart.series[0];
  size_t end = first.y.size();
  while (end > 0 && !Drawable(first.y[end - 1], ay.log)) --end;
  const double h = 8 + 16.0 * static_cast<double>(named.size());
  const double w = 40 + 7.0 * static_cast<double>(chars), x = kRight - 10 - w;
  const double y = end > 0 && ay.Fraction(first.y[end - 1]) > 0.5 ? kBottom - 10 - h : kTop + 10;
  *out += "<rect class=\"legend\" x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(w) +
          "\" height=\"" + Num(h) + "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n";
  for (size_t i = 0; i < named.size(); ++i) {
    const ChartSeries& s = *named[i];
    const double row = y + 16 + 16.0 * static_cast<double>(i);
    if (s.line_width > 0) {
      *out += "<path d=\"M" + Num(x + 8) + " " + Num(row - 4) + "h20\" stroke=\"" + s.color +
              "\" stroke-width=\"" + Num(std::max(s.line_width, 1.5)) + "\"/>\n";
    }
    if (s.markers) *out += Circle({x + 18, row - 4}, 3, "legend", s);
    *out += Text(x + 34, row, "start", s.name);
  }
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  if (!(raw > 0) || !std::isfinite(raw)) return {lo, hi};
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  const double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
  const long first = static_cast<long>(std::floor(lo / step + 1e-9));
  const long last = static_cast<long>(std::ceil(hi / step - 1e-9));
  std::vector<double> ticks;
  for (long k = first; k <= last; ++k) ticks.push_back(static_cast<double>(k) * step);
  return ticks;
}

std::string RenderChart(const Chart& chart) {
  const Axis ax = XAxis(chart), ay = YAxis(chart);
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(kWidth) +
                    "\" height=\"" + Num(kHeight) + "\" viewBox=\"0 0 " + Num(kWidth) + " " +
                    Num(kHeight) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n"
                    "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  DrawFrame(chart, ax, ay, &out);
  for (const ChartSeries& s : chart.series) DrawSeries(s, ax, ay, &out);
  DrawLegend(chart, ay, &out);
  return out + "</svg>\n";
}

}  // namespace trainyard::client
