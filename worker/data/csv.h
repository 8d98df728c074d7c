// Numeric CSV tables (one sample per line) as a Dataset: every column but the label column
// becomes a float32 feature, the label column the target. Files may be gzip-compressed.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "worker/data/dataset.h"
#include "worker/tensor/dtype.h"

namespace trainyard::data {

struct CsvOptions {
  bool header = false;        // the first non-blank line names the columns and is skipped
  int64_t label_column = -1;  // 0-based; negative counts from the end (-1 is the last column)
  char delimiter = ',';       // ' ' means "any run of spaces or tabs" (whitespace tables)
  // kInt64: class labels, each cell an integer (written "3" or "3.0"). kFloat32 or kFloat64:
  // regression targets.
  DType target_dtype = DType::kInt64;
};

// inputs float32 (N, F), targets (N) of options.target_dtype. Blank lines are skipped and a
// trailing '\r' is dropped. Errors name `path`, the 1-based line and column and the bad text.
StatusOr<Dataset> LoadCsv(const std::string& path, const CsvOptions& options = {});

// The same over text in memory; `source` names it in errors (a path, or "<string>").
StatusOr<Dataset> ParseCsv(std::string_view text, const std::string& source,
                           const CsvOptions& options = {});

}  // namespace trainyard::data
