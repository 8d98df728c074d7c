// Installs a handler for SIGINT and SIGTERM for the life of a scope and restores the previous
// handlers after it: how `trainyard train` and the daemons turn Ctrl-C and SIGTERM into a clean
// stop.
#pragma once

#include <signal.h>

namespace trainyard {

class ScopedStopSignals {
 public:
  explicit ScopedStopSignals(void (*handler)(int)) {
    struct sigaction action = {};
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~ScopedStopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  ScopedStopSignals(const ScopedStopSignals&) = delete;
  ScopedStopSignals& operator=(const ScopedStopSignals&) = delete;

 private:
  struct sigaction old_int_ = {};
  struct sigaction old_term_ = {};
};

}  // namespace trainyard
