// Summary statistics of a tensor's values, for checking random initialisation.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/tensor/tensor.h"

namespace trainyard::nn::testing {

struct Stats {
  double min = 0, max = 0, mean = 0, std = 0;
};

inline Stats StatsOf(const Tensor& t) {
  const std::vector<double> v = ToVector<double>(t);
  Stats s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / v.size());
  return s;
}

}  // namespace trainyard::nn::testing
