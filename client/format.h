// How the CLI writes numbers people read.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include "common/spec/model_graph.h"

namespace trainyard::client {

// 65.2 -> "1:05", 7384 -> "2:03:04"; "?" when not a finite, non-negative number.
inline std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

// 1234567.8 -> "1,234,568"; "n/a" when not finite.
inline std::string Grouped(double v) {
  if (!std::isfinite(v)) return "n/a";
  std::string digits = std::to_string(static_cast<long long>(std::llround(v)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "1,234 forward FLOPs per sample" of a model graph.
inline std::string FlopsPerSample(const spec::CompiledGraph& g) {
  return Grouped(g.flops_per_sample) + " forward FLOPs per sample";
}

}  // namespace trainyard::client
