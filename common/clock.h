// Clock: the source of time, injected so that timeouts are testable without sleeping.
// RealClock reads std::chrono::steady_clock; FakeClock moves only when told to.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace trainyard {

class Clock {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;
  virtual ~Clock() = default;
  // Monotonic time; comparable only with other values from the same clock.
  virtual TimePoint Now() const = 0;
  // Wall-clock seconds since the Unix epoch (for records people read).
  virtual double UnixSeconds() const = 0;

  // The process-wide real clock.
  static Clock* Real();
};

class RealClock final : public Clock {
 public:
  TimePoint Now() const override;
  double UnixSeconds() const override;
};

// Thread-safe; starts at an arbitrary point and advances only through Advance().
class FakeClock final : public Clock {
 public:
  explicit FakeClock(double unix_seconds = 1.7e9) : unix_start_(unix_seconds) {}
  TimePoint Now() const override;
  double UnixSeconds() const override;
  void Advance(Duration d);

 private:
  mutable std::mutex mu_;
  Duration elapsed_{0};
  double unix_start_;
};

// Seconds as a double between two time points.
inline double SecondsBetween(Clock::TimePoint a, Clock::TimePoint b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace trainyard
