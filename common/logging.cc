#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace trainyard {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("TY_LOG_LEVEL");
  if (env == nullptr) return LogLevel::INFO;
  if (std::strcmp(env, "DEBUG") == 0) return LogLevel::DEBUG;
  if (std::strcmp(env, "WARNING") == 0) return LogLevel::WARNING;
  if (std::strcmp(env, "ERROR") == 0) return LogLevel::ERROR;
  return LogLevel::INFO;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::DEBUG:
      return "D";
    case LogLevel::INFO:
      return "I";
    case LogLevel::WARNING:
      return "W";
    case LogLevel::ERROR:
      return "E";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(Level().load(std::memory_order_relaxed)); }

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  stream_ << LevelName(level_) << " " << stamp << "." << (ms / 100) << (ms / 10 % 10) << (ms % 10)
          << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << "\n";
  std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace internal
}  // namespace trainyard
