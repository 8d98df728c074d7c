// Grad mode: whether ops record a graph. Thread-local, on by default.
#pragma once

namespace trainyard::autograd {

class GradMode {
 public:
  static bool IsEnabled();
  static void SetEnabled(bool enabled);
};

// Disables recording for its scope (restores the previous mode on exit).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::IsEnabled()) { GradMode::SetEnabled(false); }
  ~NoGradGuard() { GradMode::SetEnabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Enables recording for its scope.
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::IsEnabled()) { GradMode::SetEnabled(true); }
  ~EnableGradGuard() { GradMode::SetEnabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace trainyard::autograd

namespace trainyard {
using autograd::NoGradGuard;
}
