// A small leveled logger to stderr: one line per message with time, level and file:line.
//
//   TY_LOG(INFO) << "loaded " << n << " samples";
// The minimum level comes from TY_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR; default INFO) or
// SetLogLevel(). Thread-safe: each message is written with one call.
#pragma once

#include <sstream>

namespace trainyard {

enum class LogLevel { DEBUG = 0, INFO = 1, WARNING = 2, ERROR = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal
}  // namespace trainyard

#define TY_LOG(level)                                              \
  if (::trainyard::LogLevel::level < ::trainyard::GetLogLevel()) { \
  } else                                                           \
    ::trainyard::internal::LogMessage(::trainyard::LogLevel::level, __FILE__, __LINE__).stream()
