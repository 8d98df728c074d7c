// A line chart as one self-contained SVG document, written by hand (no library): title, axes
// with "nice" ticks (1, 2 or 5 x 10^k; decades on a log scale), grid, series drawn as polylines
// and/or markers, and a legend. It knows nothing of where the numbers come from (client/plot.h).
#pragma once

#include <string>
#include <vector>

namespace trainyard::client {

struct ChartSeries {
  std::string name;       // in the legend; "" leaves the series out of it
  std::string css_class;  // the class of its elements, e.g. "raw", so tests and CSS find them
  std::string color;      // an SVG colour, "#1f77b4"
  double line_width = 0;  // pixels; 0 draws no line
  double opacity = 1;
  bool markers = false;  // a dot at each point
  // x ascending. A non-finite y (and, on a log axis, y <= 0) is a gap that splits the line.
  std::vector<double> x, y;
};

struct Chart {
  std::string title, subtitle, x_label, y_label;
  bool log_y = false;
  std::vector<ChartSeries> series;
};

// The SVG text. The x axis spans the series' smallest to largest x exactly; the y axis is
// widened to whole ticks. A series with more points than twice the plot's width in pixels is
// thinned to the first smallest and largest y of each pixel column (spikes stay visible), so
// the output stays under a few hundred KiB however long the run; a gap inside one column is
// then too narrow to see and is not drawn. The plot area is `<rect class="plot-area" ...>`.
std::string RenderChart(const Chart& chart);

// The tick values of a linear axis covering [lo, hi] with about `target` intervals: multiples
// of one step of 1, 2 or 5 x 10^k, from the last at or below lo to the first at or above hi.
std::vector<double> NiceTicks(double lo, double hi, int target);

}  // namespace trainyard::client
