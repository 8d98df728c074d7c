#include "worker/optim/validate.h"

#include <cmath>
#include <cstdio>

namespace trainyard::optim::internal {
namespace {

Status Broken(const std::string& owner, const char* field, const std::string& value,
              const std::string& rule) {
  return InvalidArgumentError(owner + ": " + field + " is " + value + "; it must be " + rule);
}

}  // namespace

std::string FormatValue(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", value);
  return buf;
}

Status CheckAtLeast(const std::string& owner, const char* field, double value, double lo) {
  if (std::isfinite(value) && value >= lo) return OkStatus();
  return Broken(owner, field, FormatValue(value), "finite and at least " + FormatValue(lo));
}

Status CheckFraction(const std::string& owner, const char* field, double value) {
  if (value >= 0 && value < 1) return OkStatus();
  return Broken(owner, field, FormatValue(value), "in [0, 1)");
}

Status CheckBetween(const std::string& owner, const char* field, double value, double lo,
                    double hi) {
  if (value >= lo && value <= hi) return OkStatus();
  return Broken(owner, field, FormatValue(value),
                "in [" + FormatValue(lo) + ", " + FormatValue(hi) + "]");
}

Status CheckPositive(const std::string& owner, const char* field, double value) {
  if (std::isfinite(value) && value > 0) return OkStatus();
  return Broken(owner, field, FormatValue(value), "finite and positive");
}

Status CheckAbove(const std::string& owner, const char* field, double value, double lo) {
  if (std::isfinite(value) && value > lo) return OkStatus();
  return Broken(owner, field, FormatValue(value), "finite and greater than " + FormatValue(lo));
}

Status CheckOpenInterval(const std::string& owner, const char* field, double value, double lo,
                         double hi) {
  if (value > lo && value < hi) return OkStatus();
  return Broken(owner, field, FormatValue(value),
                "in (" + FormatValue(lo) + ", " + FormatValue(hi) + ")");
}

Status CheckCountAtLeast(const std::string& owner, const char* field, int64_t value, int64_t lo) {
  if (value >= lo) return OkStatus();
  return Broken(owner, field, std::to_string(value), "at least " + std::to_string(lo));
}

}  // namespace trainyard::optim::internal
