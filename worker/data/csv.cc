#include "worker/data/csv.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "worker/data/file_io.h"
#include "worker/tensor/factories.h"

namespace trainyard::data {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> SplitCells(std::string_view line, char delimiter) {
  std::vector<std::string_view> cells;
  if (delimiter == ' ') {
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      if (j > i) cells.push_back(line.substr(i, j - i));
      i = j;
    }
    return cells;
  }
  size_t start = 0;
  while (true) {
    size_t end = line.find(delimiter, start);
    cells.push_back(Trim(line.substr(start, end == std::string_view::npos ? end : end - start)));
    if (end == std::string_view::npos) return cells;
    start = end + 1;
  }
}

// One line's cells as doubles; the error names the line, the column and the text.
Status ParseRow(const std::vector<std::string_view>& cells, const std::string& where,
                std::vector<double>* out) {
  out->clear();
  for (size_t c = 0; c < cells.size(); ++c) {
    std::string cell(cells[c]);
    char* end = nullptr;
    errno = 0;
    double v = cell.empty() ? 0.0 : std::strtod(cell.c_str(), &end);
    if (cell.empty() || end != cell.c_str() + cell.size() || errno == ERANGE || !std::isfinite(v)) {
      return InvalidArgumentError(where + ", column " + std::to_string(c + 1) + ": \"" + cell +
                                  "\" is not a finite number");
    }
    out->push_back(v);
  }
  return OkStatus();
}

struct Table {
  std::vector<std::vector<double>> rows;  // every row as wide as the first
  std::vector<size_t> lines;              // the 1-based line each row came from
};

StatusOr<Table> ParseTable(std::string_view text, const std::string& source,
                           const CsvOptions& options) {
  Table table;
  auto& rows = table.rows;
  std::vector<double> row;
  size_t line_no = 0, pos = 0;
  bool skip_header = options.header;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = Trim(text.substr(pos, eol - pos));
    pos = eol + 1;
    ++line_no;
    if (line.empty()) continue;
    if (skip_header) {
      skip_header = false;
      continue;
    }
    const std::string where = source + ": line " + std::to_string(line_no);
    std::vector<std::string_view> cells = SplitCells(line, options.delimiter);
    if (!rows.empty() && cells.size() != rows[0].size()) {
      return InvalidArgumentError(where + " has " + std::to_string(cells.size()) +
                                  " columns but earlier lines have " +
                                  std::to_string(rows[0].size()));
    }
    RETURN_IF_ERROR(ParseRow(cells, where, &row));
    rows.push_back(row);
    table.lines.push_back(line_no);
  }
  if (rows.empty()) return InvalidArgumentError(source + ": has no data rows");
  return table;
}

Status CheckLabel(double v, const std::string& source, size_t line, int64_t column) {
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) return OkStatus();
  return InvalidArgumentError(source + ": line " + std::to_string(line) + ", column " +
                              std::to_string(column + 1) + ": label " + std::to_string(v) +
                              " is not an integer; use a float target dtype for regression");
}

}  // namespace

StatusOr<Dataset> ParseCsv(std::string_view text, const std::string& source,
                           const CsvOptions& options) {
  const DType tdt = options.target_dtype;
  if (tdt != DType::kInt64 && tdt != DType::kFloat32 && tdt != DType::kFloat64) {
    return InvalidArgumentError(std::string("csv target dtype ") + DTypeName(tdt) +
                                " is not supported; use int64, float32 or float64");
  }
  ASSIGN_OR_RETURN(Table table, ParseTable(text, source, options));
  const auto& rows = table.rows;
  const int64_t width = static_cast<int64_t>(rows[0].size());
  const int64_t label =
      options.label_column < 0 ? width + options.label_column : options.label_column;
  if (width < 2 || label < 0 || label >= width) {
    return InvalidArgumentError(source + ": label column " + std::to_string(options.label_column) +
                                " does not fit rows of " + std::to_string(width) +
                                " columns (a row needs at least one feature and the label)");
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  Tensor inputs = Empty({n, width - 1});
  Tensor targets = Empty({n}, Options(DType::kFloat64));
  float* x = inputs.data<float>();
  double* y = targets.data<double>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      if (c != label) *x++ = static_cast<float>(rows[r][c]);
    }
    y[r] = rows[r][label];
    if (tdt == DType::kInt64) RETURN_IF_ERROR(CheckLabel(y[r], source, table.lines[r], label));
  }
  return Dataset(std::move(inputs), ConvertTo(targets, tdt));
}

StatusOr<Dataset> LoadCsv(const std::string& path, const CsvOptions& options) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path));
  return ParseCsv(text, path, options);
}

}  // namespace trainyard::data
