// Coordinator, the worker side: registration and reconciliation, heartbeats and the commands
// they carry, listing workers, liveness and free capacity (coordinator.h).
#include <algorithm>
#include <cctype>
#include <set>

#include "common/logging.h"
#include "server/coordinator.h"

namespace trainyard::server {

using trainyard::v1::JobEvent;
using trainyard::v1::WorkerCommand;

namespace {

Status CheckWorkerName(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 63 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
      });
  if (ok) return OkStatus();
  return InvalidArgumentError("worker name \"" + name +
                              "\": must be 1 to 63 characters of A-Z, a-z, 0-9, '-', '.', '_'");
}

}  // namespace

std::chrono::milliseconds LeaseOf(const CoordinatorOptions& options) {
  return options.heartbeat_timeout * 3 / 4;
}

StatusOr<trainyard::v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const trainyard::v1::RegisterWorkerRequest& req) {
  RETURN_IF_ERROR(CheckWorkerName(req.name()));
  if (req.cpu_slots() < 0 || req.cpu_slots() > 4096) {
    return InvalidArgumentError("cpu_slots = " + std::to_string(req.cpu_slots()) +
                                ": must be in [0, 4096]");
  }
  if (req.cpu_slots() == 0 && req.gpus_size() == 0) {
    return InvalidArgumentError("worker " + req.name() + " offers no CPU slot and no GPU");
  }
  std::lock_guard<std::mutex> lock(mu_);
  trainyard::v1::WorkerInfo info;
  info.set_name(req.name());
  info.set_host(req.host());
  info.set_cpu_slots(req.cpu_slots());
  *info.mutable_gpus() = req.gpus();
  info.set_metrics_address(req.metrics_address());
  info.set_memory_bytes(req.memory_bytes());
  registry_.Register(info);
  suspect_.erase(req.name());  // Note [Regroups]
  outbox_[req.name()].clear();
  WakeWorker(req.name(), /*drop=*/true);  // an older stream of this worker ends
  TY_LOG(INFO) << "worker " << req.name() << " (" << req.host()
               << ") registered: " << req.cpu_slots() << " CPU slots, " << req.gpus_size()
               << " GPUs, " << req.ranks_size() << " ranks running";
  // Reconcile: the ranks the worker reports are the truth; a rank the coordinator placed there
  // that it does not report is gone (the daemon restarted, or never got the assignment).
  std::set<std::tuple<std::string, int, int>> reported;
  for (const auto& s : req.ranks()) reported.insert({s.job_id(), s.attempt(), s.rank()});
  for (const std::string& id : order_) {
    Entry& e = *jobs_[id];
    if (e.ranks.empty() || (!ActiveAttempt(e) && !e.stopping)) continue;
    const int attempt = e.job.attempts_size();
    std::string gone;  // why the attempt lost a rank (the first one missing)
    for (auto& [rank, r] : e.ranks) {
      if (r.placement.worker() != req.name() || r.status.exited()) continue;
      if (reported.count({id, attempt, rank})) continue;
      if (!r.reported && (e.job.state() == trainyard::v1::SCHEDULED || Elastic(e))) {
        // Never started: the assignment was lost with a stream; send it again. (An elastic
        // job's rank of a regroup that its worker lost starts afresh and takes its state from
        // the live members.)
        ResendAssignment(e, req.name());
        break;
      }
      // Exited before the abort: no worker will report its exit, and its slot is free.
      r.status.set_exited(true);
      if (gone.empty()) {
        gone = "worker " + req.name() + " (" + req.host() + ") came back without " +
               RankName(r.placement) + " of attempt " + std::to_string(attempt);
      }
    }
    // An elastic job's other ranks regroup (coordinator_elastic.cc); else the attempt ends.
    if (gone.empty() || !ActiveAttempt(e) || (Elastic(e) && Regroup(e, LiveRanks(e), {}, gone))) {
      continue;
    }
    AbortAttempt(e, gone);
  }
  for (const auto& s : req.ranks()) OnRankStatus(req.name(), s);
  trainyard::v1::RegisterWorkerResponse out;
  out.set_heartbeat_interval_ms(options_.heartbeat_interval.count());
  out.set_lease_ms(LeaseOf(options_).count());
  return out;
}

Status Coordinator::Heartbeat(const trainyard::v1::WorkerHeartbeat& hb) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!registry_.Heartbeat(hb.name(), hb.draining())) {
    return NotFoundError("worker " + hb.name() +
                         " is not registered (or was declared lost); "
                         "register again");
  }
  // A rank killed by a signal first: when it and the peers that lost it exit together, the
  // attempt's reason is its (an OOM kill), not a peer's "closed the connection".
  std::vector<const trainyard::v1::RankStatus*> order;
  for (const auto& s : hb.ranks()) order.push_back(&s);
  std::stable_partition(order.begin(), order.end(), [](const trainyard::v1::RankStatus* s) {
    return s->exited() && s->exit_code() > 128;
  });
  for (const trainyard::v1::RankStatus* s : order) OnRankStatus(hb.name(), *s);
  // The worker's lease starts again when this reaches it; one waiting ack is enough.
  std::deque<WorkerCommand>& box = outbox_[hb.name()];
  if (box.empty() || !box.back().has_ack()) {
    WorkerCommand ack;
    ack.mutable_ack()->set_lease_ms(LeaseOf(options_).count());
    Send(hb.name(), std::move(ack));
  }
  return OkStatus();
}

StatusOr<int64_t> Coordinator::Incarnation(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const WorkerRegistry::Entry* w = registry_.Find(name);
  if (w == nullptr || !w->alive) return NotFoundError("worker " + name + " is not registered");
  return w->incarnation;
}

StatusOr<std::vector<WorkerCommand>> Coordinator::TakeCommands(const std::string& name,
                                                               int64_t incarnation) {
  std::lock_guard<std::mutex> lock(mu_);
  const WorkerRegistry::Entry* w = registry_.Find(name);
  if (w == nullptr || !w->alive || w->incarnation != incarnation) {
    return AbortedError("worker " + name + " registered again or was declared lost");
  }
  std::vector<WorkerCommand> out(std::make_move_iterator(outbox_[name].begin()),
                                 std::make_move_iterator(outbox_[name].end()));
  outbox_[name].clear();
  return out;
}

Status Coordinator::SetCommandsWake(const std::string& name, int64_t incarnation,
                                    std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  const WorkerRegistry::Entry* w = registry_.Find(name);
  if (w == nullptr || !w->alive || w->incarnation != incarnation) {
    return AbortedError("worker " + name + " registered again or was declared lost");
  }
  wakes_[name] = {incarnation, std::move(wake)};
  if (!outbox_[name].empty()) WakeWorker(name, /*drop=*/false);
  return OkStatus();
}

void Coordinator::ClearCommandsWake(const std::string& name, int64_t incarnation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = wakes_.find(name);
  if (it != wakes_.end() && it->second.incarnation == incarnation) wakes_.erase(it);
}

void Coordinator::WakeWorker(const std::string& name, bool drop) {
  auto it = wakes_.find(name);
  if (it == wakes_.end()) return;
  it->second.wake();
  if (drop) wakes_.erase(it);
}

std::vector<trainyard::v1::WorkerInfo> Coordinator::ListWorkers() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int> used;
  std::map<std::string, int64_t> memory;
  for (const auto& [id, e] : jobs_) {
    if (!ActiveAttempt(*e) && !e->stopping) continue;
    const int64_t rank_memory = e->gang.gpu ? 0 : e->gang.rank_memory_bytes;
    for (const auto& [rank, r] : e->ranks) {
      if (r.status.exited()) continue;
      ++used[r.placement.worker()];
      memory[r.placement.worker()] += rank_memory;
    }
  }
  std::vector<trainyard::v1::WorkerInfo> out;
  for (const auto& [name, w] : registry_.all()) {
    trainyard::v1::WorkerInfo info = w.info;
    info.set_last_heartbeat_ms(NowMs() - std::chrono::duration_cast<std::chrono::milliseconds>(
                                             clock_->Now() - w.last_heartbeat)
                                             .count());
    info.set_slots_in_use(used[name]);
    info.set_memory_in_use_bytes(memory[name]);
    out.push_back(std::move(info));
  }
  return out;
}

void Coordinator::CheckLiveness(Entry& e) {
  if (!ActiveAttempt(e)) return;
  const auto now = clock_->Now();
  for (const auto& [rank, r] : e.ranks) {
    if (r.status.exited()) continue;
    const std::string& worker = r.placement.worker();
    if (registry_.IsAlive(worker)) continue;
    const WorkerRegistry::Entry* w = registry_.Find(worker);
    if (w != nullptr) {
      const std::string why = "worker " + worker + " (" + r.placement.host() +
                              ") lost: no heartbeat for " +
                              FormatSeconds(SecondsOf(now - w->last_heartbeat));
      if (Elastic(e) && Regroup(e, LiveRanks(e), {}, why)) return;  // coordinator_elastic.cc
      return AbortAttempt(e, why);
    }
    if (now - started_ >= options_.heartbeat_timeout) {
      return AbortAttempt(e, "worker " + worker + " (" + r.placement.host() +
                                 ") did not re-register within " +
                                 FormatSeconds(SecondsOf(options_.heartbeat_timeout)) +
                                 " of the coordinator's restart");
    }
  }
  if (e.job.state() == trainyard::v1::SCHEDULED &&
      now - e.attempt_started >= options_.start_timeout) {
    std::string missing;
    for (const auto& [rank, r] : e.ranks) {
      if (!r.reported) missing += (missing.empty() ? "" : ", ") + RankName(r.placement);
    }
    AbortAttempt(
        e, missing + " did not start within " + FormatSeconds(SecondsOf(options_.start_timeout)));
  }
}

std::vector<WorkerCapacity> Coordinator::FreeCapacity(bool gpu) const {
  std::map<std::string, std::set<int>> used;
  std::map<std::string, int64_t> memory;  // estimates of the CPU ranks placed there
  for (const auto& [id, e] : jobs_) {
    if ((!ActiveAttempt(*e) && !e->stopping) || (e->spec.device == "cuda") != gpu) continue;
    const int64_t rank_memory = gpu ? 0 : e->gang.rank_memory_bytes;
    for (const auto& [rank, r] : e->ranks) {
      if (r.status.exited()) continue;
      used[r.placement.worker()].insert(r.placement.slot());
      memory[r.placement.worker()] += rank_memory;
    }
  }
  std::vector<WorkerCapacity> out;
  for (const WorkerRegistry::Entry* w : registry_.Alive()) {
    if (w->draining) continue;
    WorkerCapacity c = CapacityOf(w->info, gpu);
    c.free_slots.clear();
    for (int s = 0; s < c.total_slots; ++s) {
      if (used[c.name].count(s) == 0) c.free_slots.push_back(s);
    }
    c.memory_in_use_bytes = memory[c.name];
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace trainyard::server
