#include "server/coordinator.h"

#include <algorithm>
#include <cmath>

#include "common/json.h"
#include "common/logging.h"
#include "common/random_id.h"
#include "server/scheduler.h"

namespace trainyard::server {

using trainyard::v1::Job;
using trainyard::v1::JobEvent;
using trainyard::v1::JobState;
using trainyard::v1::WorkerCommand;

const char* JobStateName(JobState state) {
  switch (state) {
    case trainyard::v1::PENDING: return "PENDING";
    case trainyard::v1::SCHEDULED: return "SCHEDULED";
    case trainyard::v1::RUNNING: return "RUNNING";
    case trainyard::v1::RESTARTING: return "RESTARTING";
    case trainyard::v1::SUCCEEDED: return "SUCCEEDED";
    case trainyard::v1::FAILED: return "FAILED";
    case trainyard::v1::CANCELLED: return "CANCELLED";
    default: return "UNSPECIFIED";
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
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.size() >= kMaxQueued && event.has_step()) return;  // a slow watcher skips steps
  queue_.push_back(std::move(event));
  cv_.notify_all();
}

void Watcher::End() {
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  cv_.notify_all();
}

// ---- Coordinator: set-up and clients ----

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
      next_job_number_ = std::max<int64_t>(next_job_number_,
                                           std::atoll(job.id().c_str() + dash + 1) + 1);
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

StatusOr<Job> Coordinator::Submit(const std::string& spec_json, const std::string& actor) {
  if (spec_json.size() > options_.max_spec_bytes) {
    return InvalidArgumentError("spec_json is " + std::to_string(spec_json.size()) +
                                " bytes; at most " + std::to_string(options_.max_spec_bytes));
  }
  StatusOr<Json> json = Json::Parse(spec_json);
  if (!json.ok()) return InvalidArgumentError("spec_json is not JSON: " + json.status().message());
  // A spec without checkpoint.dir checkpoints under the coordinator's root (when it has one),
  // so that a restarted attempt resumes; the dir is set before validation, which asks for one
  // when checkpoint.every_steps is set.
  const Json* ckpt = json->is_object() ? json->Find("checkpoint") : nullptr;
  const Json* dir = ckpt && ckpt->is_object() ? ckpt->Find("dir") : nullptr;
  const bool own_dir = dir != nullptr && !(dir->is_string() && dir->string_value().empty());
  if (json->is_object() && !own_dir && !options_.checkpoint_root.empty() &&
      (ckpt == nullptr || ckpt->is_null() || ckpt->is_object())) {
    if (ckpt == nullptr || ckpt->is_null()) json->Set("checkpoint", Json::Object());
    json->Find("checkpoint")->Set("dir", options_.checkpoint_root);
  }
  ASSIGN_OR_RETURN(spec::JobSpec spec, spec::ParseJobSpec(*json));
  std::lock_guard<std::mutex> lock(mu_);
  GangRequest gang = GangOf("", spec);
  std::vector<WorkerCapacity> all;
  for (const WorkerRegistry::Entry* w : registry_.Alive()) {
    all.push_back(CapacityOf(w->info, gang.gpu));
  }
  if (all.empty()) {
    return FailedPreconditionError("no worker is registered with the coordinator; start "
                                   "trainyard-worker on the nodes (or use trainyard local)");
  }
  RETURN_IF_ERROR(CheckCanEverFit(gang, all));

  auto e = std::make_unique<Entry>();
  const std::string id = spec.name + "-" + std::to_string(next_job_number_++);
  // Each job checkpoints in a directory of its own: a new job never resumes an older one's.
  if (!spec.checkpoint.dir.empty()) spec.checkpoint.dir += "/" + id;
  Job& job = e->job;
  job.set_id(id);
  job.set_uid(RandomHex(32));
  job.set_submitted_by(actor);
  job.set_name(spec.name);
  job.set_priority(spec.priority);
  job.set_world_size(spec.parallelism.world_size);
  job.set_spec_json(spec::ToJson(spec).Dump());
  job.set_created_ms(NowMs());
  job.set_max_restarts(spec.fault_tolerance.max_restarts);
  e->stragglers = std::make_unique<StragglerDetector>(spec.parallelism.world_size,
                                                      spec.fault_tolerance.straggler_factor,
                                                      spec.fault_tolerance.straggler_window_steps);
  e->spec = std::move(spec);
  gang.job_id = id;
  e->gang = std::move(gang);
  Entry& entry = *e;
  jobs_[id] = std::move(e);
  order_.push_back(id);
  Status s = Transition(entry, trainyard::v1::PENDING, actor.empty() ? "" : "submitted by " + actor,
                        actor);
  if (!s.ok()) {
    jobs_.erase(id);
    order_.pop_back();
    return s;
  }
  return ForClient(entry, /*summary=*/false);
}

Job Coordinator::ForClient(const Entry& e, bool summary) const {
  Job job = e.job;
  for (auto& a : *job.mutable_attempts()) a.clear_secret();
  if (summary) {
    job.clear_spec_json();
    job.clear_attempts();
    job.clear_diagnoses();
  }
  return job;
}

namespace {

Status CheckJobId(const std::string& id) {
  if (id.empty()) {
    return InvalidArgumentError("id is empty; give a job id (trainyard list shows them)");
  }
  return OkStatus();
}

}  // namespace

StatusOr<Job> Coordinator::GetJob(const std::string& id) {
  RETURN_IF_ERROR(CheckJobId(id));
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Find(id);
  if (e == nullptr) return NotFoundError("no job " + id + " (trainyard list shows the jobs)");
  return ForClient(*e, false);
}

StatusOr<trainyard::v1::ListJobsResponse> Coordinator::ListJobs(
    const trainyard::v1::ListJobsRequest& req) {
  if (req.page_size() < 0 || req.page_size() > 1000) {
    return InvalidArgumentError("page_size = " + std::to_string(req.page_size()) +
                                ": must be in [0, 1000] (0: 100)");
  }
  size_t offset = 0;
  if (!req.page_token().empty()) {
    char* end = nullptr;
    offset = std::strtoull(req.page_token().c_str(), &end, 10);
    if (*end != '\0') return InvalidArgumentError("page_token \"" + req.page_token() + "\" is not one this coordinator gave");
  }
  for (int i = 0; i < req.states_size(); ++i) {
    const int state = req.states(i);
    if (state == trainyard::v1::JOB_STATE_UNSPECIFIED || !trainyard::v1::JobState_IsValid(state)) {
      return InvalidArgumentError("states[" + std::to_string(i) + "] = " + std::to_string(state) +
                                  ": not a job state; allowed: PENDING (1) to CANCELLED (7)");
    }
  }
  const size_t size = req.page_size() == 0 ? 100 : static_cast<size_t>(req.page_size());
  std::lock_guard<std::mutex> lock(mu_);
  trainyard::v1::ListJobsResponse out;
  size_t matched = 0;
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    const Entry& e = *jobs_.at(*it);
    if (req.states_size() > 0 &&
        std::find(req.states().begin(), req.states().end(), e.job.state()) == req.states().end()) {
      continue;
    }
    if (matched++ < offset) continue;
    if (static_cast<size_t>(out.jobs_size()) == size) {
      out.set_next_page_token(std::to_string(offset + size));
      break;
    }
    *out.add_jobs() = ForClient(e, true);
  }
  return out;
}

StatusOr<Job> Coordinator::Cancel(const std::string& id, bool checkpoint,
                                  const std::string& actor) {
  RETURN_IF_ERROR(CheckJobId(id));
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Find(id);
  if (e == nullptr) return NotFoundError("no job " + id);
  if (IsFinal(e->job.state())) {
    return FailedPreconditionError("job " + id + " is already " + JobStateName(e->job.state()));
  }
  if (!e->job.cancel_requested()) {
    e->job.set_cancel_requested(true);
    e->job.set_cancel_checkpoint(checkpoint);
    e->job.set_cancelled_by(actor);
    const std::string reason = CancelReason(e->job);
    TY_LOG(INFO) << "job " << id << ": " << reason << (checkpoint ? " (checkpoint first)" : "");
    if (ActiveAttempt(*e)) {
      // The ranks stop (after a checkpoint at a common step when asked); CANCELLED once they
      // have exited (CheckStopped).
      StopRanks(*e, checkpoint, reason, /*cancel=*/true);
      RETURN_IF_ERROR(Commit(*e, nullptr));
    } else {
      RETURN_IF_ERROR(Transition(*e, trainyard::v1::CANCELLED, reason, actor));
    }
  }
  return ForClient(*e, false);
}

StatusOr<std::shared_ptr<Watcher>> Coordinator::Watch(const std::string& id, int64_t from_seq) {
  RETURN_IF_ERROR(CheckJobId(id));
  if (from_seq < 0) {
    return InvalidArgumentError("from_seq = " + std::to_string(from_seq) +
                                ": must be 0 (the job as it is now) or an event's seq");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Find(id);
  if (e == nullptr) return NotFoundError("no job " + id);
  auto watcher = std::make_shared<Watcher>();
  if (from_seq > 0) {
    // Every event is stored before it is published, and both happen under mu_: the stored
    // ones from from_seq and then the live ones are each event exactly once.
    ASSIGN_OR_RETURN(std::vector<JobEvent> stored, store_->LoadEvents(id));
    for (JobEvent& event : stored) {
      if (event.seq() >= from_seq) watcher->Push(std::move(event));
    }
  } else {
    JobEvent now;
    now.set_time_ms(NowMs());
    now.mutable_state()->set_to(e->job.state());
    now.mutable_state()->set_reason(e->job.reason());
    now.mutable_state()->set_attempt(e->job.attempts_size());
    watcher->Push(now);
    if (e->job.last_step().step() > 0) {
      JobEvent step;
      step.set_time_ms(NowMs());
      *step.mutable_step() = e->job.last_step();
      watcher->Push(step);
    }
  }
  if (IsFinal(e->job.state())) {
    watcher->End();
  } else {
    e->watchers.push_back(watcher);
  }
  return watcher;
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
    info.set_last_heartbeat_ms(
        NowMs() - std::chrono::duration_cast<std::chrono::milliseconds>(clock_->Now() -
                                                                        w.last_heartbeat)
                      .count());
    info.set_slots_in_use(used[name]);
    info.set_memory_in_use_bytes(memory[name]);
    out.push_back(std::move(info));
  }
  return out;
}

bool Coordinator::ActiveAttempt(const Entry& e) const {
  return e.job.state() == trainyard::v1::SCHEDULED || e.job.state() == trainyard::v1::RUNNING;
}

// ---- Attempts ----

void Coordinator::StartAttempt(Entry& e, std::vector<trainyard::v1::RankPlacement> ranks) {
  trainyard::v1::Attempt* a = e.job.add_attempts();
  a->set_number(e.job.attempts_size());
  a->set_started_ms(NowMs());
  a->set_secret(RandomHex(32));
  e.ranks.clear();
  std::map<std::string, int> by_worker;  // ranks on each
  for (auto& p : ranks) {
    e.ranks[p.rank()].placement = p;
    ++by_worker[p.worker()];
    *a->add_ranks() = std::move(p);
  }
  e.attempt_started = clock_->Now();
  e.stopping = false;
  e.job.clear_stragglers();
  e.stragglers = std::make_unique<StragglerDetector>(e.spec.parallelism.world_size,
                                                     e.spec.fault_tolerance.straggler_factor,
                                                     e.spec.fault_tolerance.straggler_window_steps);
  rendezvous_.Open({e.job.id(), a->number(), a->secret()});
  // Committed before any worker hears of it: a restarted coordinator knows every attempt that
  // may have ranks.
  (void)Transition(e, trainyard::v1::SCHEDULED,
                   "attempt " + std::to_string(a->number()) + " on " +
                       std::to_string(by_worker.size()) + " worker" +
                       (by_worker.size() == 1 ? "" : "s"));
  for (const auto& [worker, unused] : by_worker) ResendAssignment(e, worker);
}

void Coordinator::ResendAssignment(Entry& e, const std::string& worker) {
  const trainyard::v1::Attempt& a = e.job.attempts(e.job.attempts_size() - 1);
  WorkerCommand c;
  trainyard::v1::Assignment& as = *c.mutable_assign();
  as.set_job_id(e.job.id());
  as.set_job_uid(e.job.uid());
  as.set_attempt(a.number());
  as.set_secret(a.secret());
  as.set_spec_json(e.job.spec_json());
  as.set_world_size(e.spec.parallelism.world_size);
  for (const auto& p : a.ranks()) {
    if (p.worker() == worker) *as.add_ranks() = p;
  }
  Send(worker, std::move(c));
}

void Coordinator::Send(const std::string& worker, WorkerCommand command) {
  outbox_[worker].push_back(std::move(command));
  commands_cv_.notify_all();
}

void Coordinator::StopRanks(Entry& e, bool checkpoint, const std::string& reason, bool cancel) {
  const trainyard::v1::Attempt& a = e.job.attempts(e.job.attempts_size() - 1);
  std::map<std::string, bool> workers;
  for (const auto& [rank, r] : e.ranks) {
    if (!r.status.exited()) workers[r.placement.worker()] = true;
  }
  for (const auto& [worker, unused] : workers) {
    WorkerCommand c;
    trainyard::v1::StopRanks* stop = cancel ? c.mutable_cancel() : c.mutable_abort();
    stop->set_job_id(e.job.id());
    stop->set_attempt(a.number());
    stop->set_checkpoint(checkpoint);
    stop->set_reason(reason);
    Send(worker, std::move(c));
  }
  e.stopping = true;
  e.stop_deadline = clock_->Now() + options_.stop_timeout;
}

}  // namespace trainyard::server
