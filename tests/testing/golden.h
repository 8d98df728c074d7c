// Reader for the golden files written by tests/golden/make_golden.py (format described there).
#pragma once

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "worker/tensor/factories.h"

namespace trainyard::testing {

struct GoldenCase {
  std::string name;
  std::map<std::string, Tensor> tensors;
  std::vector<std::string> order;  // tensor names in file order (inputs first)
  bool has(const std::string& k) const { return tensors.count(k) > 0; }
  const Tensor& at(const std::string& k) const { return tensors.at(k); }
};

// tests/golden/<file> (TY_GOLDEN_DIR is set for every test binary by ty_test).
inline std::string GoldenPath(const std::string& file) {
  return std::string(TY_GOLDEN_DIR) + "/" + file;
}

// Reads every case of `path`; an unreadable or malformed file gives an empty list.
inline std::vector<GoldenCase> ReadGolden(const std::string& path) {
  std::ifstream in(path);
  std::vector<GoldenCase> cases;
  std::string word;
  while (in >> word) {
    if (word == "#") {
      std::getline(in, word);
    } else if (word == "case") {
      cases.emplace_back();
      in >> cases.back().name;
    } else if (word == "tensor") {
      std::string name, kind;
      int ndim = 0;
      in >> name >> kind >> ndim;
      std::vector<int64_t> dims(ndim);
      for (auto& d : dims) in >> d;
      Shape shape(dims);
      if (kind == "f32") {
        std::vector<float> v(shape.numel());
        for (auto& x : v) in >> x;
        cases.back().tensors[name] = FromVector<float>(v, shape);
      } else {
        std::vector<int64_t> v(shape.numel());
        for (auto& x : v) in >> x;
        cases.back().tensors[name] = FromVector<int64_t>(v, shape);
      }
      cases.back().order.push_back(name);
    } else if (word != "end") {
      return {};
    }
    if (!in && !in.eof()) return {};
  }
  return cases;
}

// max |a - b| / max |b| (0 when both are zero); a and b must have equal shapes. A NaN or inf
// in `a` where `b` is finite gives infinity, so it can never pass a tolerance.
inline double RelativeError(const Tensor& a, const Tensor& b) {
  std::vector<double> x = ToVector<double>(a), y = ToVector<double>(b);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) && std::isfinite(y[i])) return INFINITY;
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

}  // namespace trainyard::testing
