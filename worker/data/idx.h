// The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a big-endian
// header (magic 0x00000803 and N, rows, cols for images; 0x00000801 and N for labels) followed
// by unsigned bytes. Files may be gzip-compressed or raw.
#pragma once

#include <string>

#include "common/status.h"
#include "worker/data/dataset.h"

namespace trainyard::data {

struct IdxOptions {
  // Pixels are scaled to [0, 1]; with `normalize` they then become (x - mean) / std. The
  // defaults are Fashion-MNIST's training-set statistics.
  bool normalize = true;
  float mean = 0.2860f;
  float std = 0.3530f;
};

// Images become float32 (N, 1, rows, cols), labels int64 (N). Every failure names the file:
// missing (NotFound), bad magic or dimensions (InvalidArgument), a size other than the header
// implies (DataLoss, with expected and actual bytes), or image and label counts that differ.
StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                          const IdxOptions& options = {});

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxPaths {
  std::string images;
  std::string labels;
};

// The Fashion-MNIST files of `split` ("train": 60 000 samples, "test": 10 000) under `dir`.
StatusOr<IdxPaths> FashionMnistPaths(const std::string& split,
                                     const std::string& dir = kFashionMnistDir);

}  // namespace trainyard::data
