// Coordinator, what clients call: submit, get, list, cancel and watch jobs (coordinator.h).
#include <algorithm>
#include <cmath>

#include "common/json.h"
#include "common/logging.h"
#include "common/random_id.h"
#include "server/coordinator.h"

namespace trainyard::server {

using trainyard::v1::Job;
using trainyard::v1::JobEvent;
using trainyard::v1::JobState;

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
    return FailedPreconditionError(
        "no worker is registered with the coordinator; start "
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
    job.clear_collectives();
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
    if (*end != '\0')
      return InvalidArgumentError("page_token \"" + req.page_token() +
                                  "\" is not one this coordinator gave");
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

}  // namespace trainyard::server
