// Checks of user-supplied optimizer and schedule settings (they come from job specs). Each
// returns OK, or InvalidArgument "<owner>: <field> is <value>; it must be <rule>". NaN and
// infinities break every rule.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace trainyard::optim::internal {

// lo <= value, value finite.
Status CheckAtLeast(const std::string& owner, const char* field, double value, double lo);
// 0 <= value < 1 (a decay rate such as beta1).
Status CheckFraction(const std::string& owner, const char* field, double value);
// lo <= value <= hi.
Status CheckBetween(const std::string& owner, const char* field, double value, double lo,
                    double hi);
// value > 0, value finite.
Status CheckPositive(const std::string& owner, const char* field, double value);
// lo < value, value finite.
Status CheckAbove(const std::string& owner, const char* field, double value, double lo);
// lo < value < hi.
Status CheckOpenInterval(const std::string& owner, const char* field, double value, double lo,
                         double hi);
// lo <= value (integers: step counts).
Status CheckCountAtLeast(const std::string& owner, const char* field, int64_t value, int64_t lo);

// A value as error messages print it: up to 10 significant digits ("0.001", "1e-08", "nan").
std::string FormatValue(double value);

}  // namespace trainyard::optim::internal
