// Coordinator (coordinator.h), its core: loading the store, committing and emitting state
// changes, the worker outboxes and the periodic tick. The roles: coordinator_jobs.cc (what
// clients call), coordinator_workers.cc (registration, heartbeats, liveness, capacity),
// coordinator_attempts.cc (starting, watching and stopping an attempt's ranks; scheduling),
// coordinator_faults.cc (how an attempt fails: exits, hangs, stragglers), coordinator_elastic.cc
// (elastic jobs regroup and grow).
#include "server/coordinator.h"

#include <algorithm>
#include <cmath>

#include "common/json.h"
#include "common/logging.h"
#include "server/scheduler.h"

namespace trainyard::server {

using trainyard::v1::Job;
using trainyard::v1::JobEvent;
using trainyard::v1::JobState;
using trainyard::v1::WorkerCommand;

const char* JobStateName(JobState state) {
  switch (state) {
    case trainyard::v1::PENDING:
      return "PENDING";
    case trainyard::v1::SCHEDULED:
      return "SCHEDULED";
    case trainyard::v1::RUNNING:
      return "RUNNING";
    case trainyard::v1::RESTARTING:
      return "RESTARTING";
    case trainyard::v1::SUCCEEDED:
      return "SUCCEEDED";
    case trainyard::v1::FAILED:
      return "FAILED";
    case trainyard::v1::CANCELLED:
      return "CANCELLED";
    default:
      return "UNSPECIFIED";
  }
}

std::string CancelReason(const Job& job) {
  return job.cancelled_by().empty() ? "cancelled" : "cancelled by " + job.cancelled_by();
}

bool IsFinal(JobState s) {
  return s == trainyard::v1::SUCCEEDED || s == trainyard::v1::FAILED ||
         s == trainyard::v1::CANCELLED;
}

// ---- Watcher ----

bool Watcher::Next(JobEvent* event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || ended_; });
  if (queue_.empty()) return false;
  *event = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool Watcher::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_ && queue_.empty();
}

void Watcher::Push(JobEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= kMaxQueued && event.has_step()) return;  // a slow watcher skips steps
    queue_.push_back(std::move(event));
    cv_.notify_all();
  }
  Wake();
}

void Watcher::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }
  Wake();
}

void Watcher::SetWake(std::function<void()> wake) {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = std::move(wake);
  }
  Wake();
}

void Watcher::ClearWake() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  wake_ = nullptr;
}

void Watcher::Wake() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  if (wake_) wake_();
}

// ---- Coordinator: set-up, the job state machine, the tick ----

Coordinator::Coordinator(std::unique_ptr<JobStore> store, const Clock* clock,
                         CoordinatorOptions options)
    : store_(std::move(store)),
      clock_(clock),
      options_(std::move(options)),
      started_(clock->Now()),
      registry_(clock, options_.heartbeat_timeout) {}

Coordinator::~Coordinator() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, e] : jobs_) {
    for (auto& w : e->watchers) {
      if (auto watcher = w.lock()) watcher->End();
    }
  }
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(std::unique_ptr<JobStore> store,
                                                           const Clock* clock,
                                                           CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(store), clock, std::move(options)));
  RETURN_IF_ERROR(c->Load());
  return c;
}

Status Coordinator::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::vector<Job> jobs, store_->LoadJobs());
  for (Job& job : jobs) {
    auto e = std::make_unique<Entry>();
    StatusOr<Json> json = Json::Parse(job.spec_json());
    StatusOr<spec::JobSpec> parsed =
        json.ok() ? spec::ParseJobSpec(*json) : StatusOr<spec::JobSpec>(json.status());
    if (!parsed.ok()) {
      return DataLossError("job " + job.id() + " in the job store has a spec this coordinator " +
                           "cannot read: " + std::string(parsed.status().message()));
    }
    e->spec = *std::move(parsed);
    e->gang = GangOf(job.id(), e->spec);
    ASSIGN_OR_RETURN(std::vector<JobEvent> events, store_->LoadEvents(job.id()));
    e->next_event_seq = events.empty() ? 1 : events.back().seq() + 1;
    const size_t dash = job.id().rfind('-');
    if (dash != std::string::npos) {
      next_job_number_ =
          std::max<int64_t>(next_job_number_, std::atoll(job.id().c_str() + dash + 1) + 1);
    }
    // Ranks of the last attempt may still run: they count until their workers re-register
    // and say (Note in RegisterWorker), or their workers stay away for heartbeat_timeout.
    if (!IsFinal(job.state()) && job.attempts_size() > 0) {
      e->attempt_started = clock_->Now();
      for (const auto& p : job.attempts(job.attempts_size() - 1).ranks()) {
        e->ranks[p.rank()].placement = p;
      }
      // A cancelled attempt stays SCHEDULED or RUNNING until its ranks exit (Cancel).
      e->stopping = job.cancel_requested() || !(job.state() == trainyard::v1::SCHEDULED ||
                                                job.state() == trainyard::v1::RUNNING);
      e->stop_deadline = clock_->Now() + options_.stop_timeout;
      const auto& a = job.attempts(job.attempts_size() - 1);
      if (a.ended_ms() == 0) rendezvous_.Open({job.id(), a.number(), a.secret()});
    }
    e->stragglers = std::make_unique<StragglerDetector>(
        e->spec.parallelism.world_size, e->spec.fault_tolerance.straggler_factor,
        e->spec.fault_tolerance.straggler_window_steps);
    e->slow_links = SlowLinkDetector(e->spec.fault_tolerance.straggler_factor);
    e->job = std::move(job);
    order_.push_back(e->job.id());
    jobs_[e->job.id()] = std::move(e);
  }
  return OkStatus();
}

Coordinator::Entry* Coordinator::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

int64_t Coordinator::NowMs() const { return std::llround(clock_->UnixSeconds() * 1000); }

Status Coordinator::Commit(Entry& e, const JobEvent* event) {
  e.job.set_updated_ms(NowMs());
  e.last_persist = clock_->Now();
  Status s = store_->Commit(e.job, event);
  if (!s.ok()) {
    TY_LOG(ERROR) << "committing job " << e.job.id() << ": " << s.message();
  }
  return s;
}

Status Coordinator::Emit(Entry& e, JobEvent event) {
  event.set_time_ms(NowMs());
  Status s;
  if (!event.has_step()) {
    event.set_seq(e.next_event_seq++);
    s = Commit(e, &event);
  }
  auto& ws = e.watchers;
  ws.erase(std::remove_if(ws.begin(), ws.end(), [](const auto& w) { return w.expired(); }),
           ws.end());
  for (auto& w : ws) {
    if (auto watcher = w.lock()) watcher->Push(event);
  }
  return s;
}

Status Coordinator::Transition(Entry& e, JobState to, const std::string& reason,
                               const std::string& actor) {
  const JobState from = e.job.state();
  e.job.set_state(to);
  e.job.set_reason(reason);
  JobEvent event;
  auto* change = event.mutable_state();
  change->set_from(from);
  change->set_to(to);
  change->set_reason(reason);
  change->set_attempt(e.job.attempts_size());
  change->set_actor(actor);
  TY_LOG(INFO) << "job " << e.job.id() << ": " << JobStateName(from) << " -> " << JobStateName(to)
               << (reason.empty() ? "" : ": " + reason)
               << (actor.empty() ? "" : " (by " + actor + ")");
  Status s = Emit(e, std::move(event));
  if (IsFinal(to)) {
    for (auto& w : e.watchers) {
      if (auto watcher = w.lock()) watcher->End();
    }
    e.watchers.clear();
  }
  return s;
}

void Coordinator::Send(const std::string& worker, WorkerCommand command) {
  outbox_[worker].push_back(std::move(command));
  WakeWorker(worker, /*drop=*/false);
}

void Coordinator::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : registry_.Expire()) {
    TY_LOG(WARNING) << "worker " << name << " lost: no heartbeat for "
                    << FormatSeconds(SecondsOf(options_.heartbeat_timeout));
    WakeWorker(name, /*drop=*/true);
  }
  for (const std::string& id : order_) {
    Entry& e = *jobs_[id];
    if (IsFinal(e.job.state()) && !e.stopping) continue;
    CheckLiveness(e);
    if (!RegroupForming(e)) CheckHang(e);  // Note [Regroups]
    CheckStragglers(e);
    CheckRegroup(e);
    CheckStopped(e);
  }
  Schedule();
  // Elastic jobs grow into the slots that no queued job takes (Note [Regroups]).
  const bool queued = std::any_of(order_.begin(), order_.end(), [&](const std::string& id) {
    const auto s = jobs_[id]->job.state();
    return s == trainyard::v1::PENDING || s == trainyard::v1::RESTARTING;
  });
  for (const std::string& id : order_) {
    if (!queued) MaybeGrow(*jobs_[id]);
  }
}

Coordinator::Snapshot Coordinator::GetSnapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  const int64_t hour_ago = NowMs() - 3600 * 1000;
  for (const std::string& id : order_) {
    const Entry& e = *jobs_[id];
    const auto state = e.job.state();
    ++s.jobs_by_state[state];
    if (state == trainyard::v1::PENDING || state == trainyard::v1::RESTARTING) ++s.queue_length;
    if (IsFinal(state) && e.job.updated_ms() < hour_ago) continue;
    JobGauges g;
    g.id = id;
    g.state = state;
    g.last_step = e.job.last_step();
    g.restarts = e.job.restarts();
    const int attempt = e.job.attempts_size();
    for (const auto& d : e.job.diagnoses()) {
      if (d.kind() == trainyard::v1::Diagnosis::HANG && d.attempt() == attempt) g.hung = true;
    }
    // Flags describe the ranks running now; those of an attempt that ended (a job restarting
    // or over) would keep the straggler alert firing.
    g.stragglers = state == trainyard::v1::RUNNING ? e.job.stragglers_size() : 0;
    s.jobs.push_back(std::move(g));
  }
  s.workers_known = static_cast<int>(registry_.all().size());
  s.workers_alive = static_cast<int>(registry_.Alive().size());
  s.stale_reports = stale_reports_;
  return s;
}

}  // namespace trainyard::server
