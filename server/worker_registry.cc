#include "server/worker_registry.h"

namespace trainyard::server {

int64_t WorkerRegistry::Register(const trainyard::v1::WorkerInfo& info) {
  Entry& e = workers_[info.name()];
  e.info = info;
  e.info.set_alive(true);
  e.last_heartbeat = clock_->Now();
  e.alive = true;
  e.incarnation = next_incarnation_++;
  e.draining = false;
  return e.incarnation;
}

bool WorkerRegistry::Heartbeat(const std::string& name, bool draining) {
  auto it = workers_.find(name);
  if (it == workers_.end() || !it->second.alive) return false;
  it->second.last_heartbeat = clock_->Now();
  it->second.draining = it->second.draining || draining;
  return true;
}

std::vector<std::string> WorkerRegistry::Expire() {
  std::vector<std::string> dead;
  const Clock::TimePoint now = clock_->Now();
  for (auto& [name, e] : workers_) {
    if (e.alive && now - e.last_heartbeat >= timeout_) {
      e.alive = false;
      e.info.set_alive(false);
      dead.push_back(name);
    }
  }
  return dead;
}

const WorkerRegistry::Entry* WorkerRegistry::Find(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

bool WorkerRegistry::IsAlive(const std::string& name) const {
  const Entry* e = Find(name);
  return e != nullptr && e->alive;
}

std::vector<const WorkerRegistry::Entry*> WorkerRegistry::Alive() const {
  std::vector<const Entry*> out;
  for (const auto& [name, e] : workers_) {
    if (e.alive) out.push_back(&e);
  }
  return out;
}

}  // namespace trainyard::server
