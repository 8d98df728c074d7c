// WorkerRegistry: the workers the coordinator knows, their capacity and their liveness. A
// worker is alive from its registration until no heartbeat has come for `timeout` (by the
// injected clock); Expire() reports the ones that just died. Not thread-safe: the coordinator
// calls it under its lock.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

class WorkerRegistry {
 public:
  struct Entry {
    trainyard::v1::WorkerInfo info;  // name, host, slots, gpus, metrics address
    Clock::TimePoint last_heartbeat{};
    bool alive = false;
    int64_t incarnation = 0;  // bumped by every registration (a restarted daemon is a new one)
    bool draining = false;    // stopping: no new ranks (until it registers again)
  };

  WorkerRegistry(const Clock* clock, std::chrono::milliseconds timeout)
      : clock_(clock), timeout_(timeout) {}

  // Adds or replaces the worker `info.name()`; it is alive from now. Returns its incarnation.
  int64_t Register(const trainyard::v1::WorkerInfo& info);
  // False when `name` is not registered (it must register again).
  bool Heartbeat(const std::string& name, bool draining = false);
  // Marks workers without a heartbeat for `timeout` dead and returns their names, once each.
  std::vector<std::string> Expire();

  const Entry* Find(const std::string& name) const;
  bool IsAlive(const std::string& name) const;
  // Alive workers by name.
  std::vector<const Entry*> Alive() const;
  const std::map<std::string, Entry>& all() const { return workers_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  const Clock* clock_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, Entry> workers_;
  int64_t next_incarnation_ = 1;
};

}  // namespace trainyard::server
