// How the CLI writes numbers people read.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

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

}  // namespace trainyard::client
