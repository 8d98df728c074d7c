#include "common/clock.h"

namespace trainyard {

Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

Clock::TimePoint RealClock::Now() const {
  return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
}

double RealClock::UnixSeconds() const {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Clock::TimePoint FakeClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return TimePoint(elapsed_);
}

double FakeClock::UnixSeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unix_start_ + std::chrono::duration<double>(elapsed_).count();
}

void FakeClock::Advance(Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  elapsed_ += d;
}

}  // namespace trainyard
