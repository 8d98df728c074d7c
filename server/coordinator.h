// Coordinator: the service's single decision point (DESIGN.md section 5). It owns the job state
// machine, the queue, placement, restarts, cancellation and the hang and straggler verdicts;
// workers execute and report. Plain C++ over protobuf messages as data: the gRPC services
// (grpc_services.h) only translate calls, and the unit tests drive it with a FakeClock and a
// memory JobStore.
//
//   PENDING --(placed)--> SCHEDULED --(every rank started)--> RUNNING --(all exit 0)--> SUCCEEDED
//   SCHEDULED/RUNNING --(lost worker, failed rank, hang, start timeout)--> RESTARTING, or
//       FAILED when no restarts are left or a rank rejected the job (exit code 2)
//   RESTARTING --(the old ranks exited, capacity)--> SCHEDULED (attempt n + 1)
//   any state but the final three --(CancelJob, once its ranks exited)--> CANCELLED
//   RUNNING --(an elastic job loses or gains ranks)--> RUNNING (attempt n + 1, regrouped;
//       coordinator_elastic.cc, Note [Regroups])
//
// Every state change is committed to the JobStore before the call that caused it returns.
// Commands for workers (assign, abort, cancel, and an acknowledgement of each heartbeat) wait
// in a per-worker outbox that the worker's Heartbeat stream drains when its wake fires
// (SetCommandsWake, TakeCommands).
//
// Fencing (Note [Checkpoint fence] in worker/trainer/checkpoint_fence.h; docs/operations.md):
// the attempt number is the epoch of a job. A worker's lease (RegisterWorkerResponse.lease_ms,
// 3/4 of heartbeat_timeout) is renewed by every command, HeartbeatAck included; a worker that
// hears nothing for that long stops its ranks before this coordinator declares it lost and
// starts the next attempt elsewhere. Metrics reports of an attempt other than the job's
// current one are refused (FailedPrecondition), logged once per job attempt and counted
// (Snapshot::stale_reports, trainyard_stale_reports_total). Tick() does the periodic work:
// liveness, hang and straggler checks, timeouts and scheduling; the server calls it a few times a
// second, tests call it after moving the clock. Thread-safe: one mutex guards everything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/rendezvous.h"
#include "common/spec/job_spec.h"
#include "common/status.h"
#include "server/health.h"
#include "server/job_store.h"
#include "server/scheduler.h"
#include "server/worker_registry.h"

namespace trainyard::server {

struct CoordinatorOptions {
  // What workers are told to send, and how long without one until a worker is lost. Workers
  // get a lease of 3/4 of the timeout (LeaseOf).
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{10000};
  // A SCHEDULED attempt whose ranks have not all started by then is aborted.
  std::chrono::milliseconds start_timeout{120000};
  // How long stopped ranks get to exit before their slots count as free anyway.
  std::chrono::milliseconds stop_timeout{30000};
  // Checkpoints of a job whose spec names no checkpoint.dir go to <checkpoint_root>/<job id>
  // ("" : such jobs restart from scratch). A spec's own dir becomes <dir>/<job id>.
  std::string checkpoint_root;
  size_t max_spec_bytes = 1 << 20;
};

// The lease workers are given: 3/4 of the heartbeat timeout, so that a partitioned worker
// stops its ranks before the coordinator declares it lost and restarts its jobs elsewhere.
std::chrono::milliseconds LeaseOf(const CoordinatorOptions& options);

// One client's view of a job's events (WatchJob).
class Watcher {
 public:
  // The next event, waiting up to `timeout` (0: not at all): false on timeout, or once the job
  // has ended and every event was taken (then ended() is true).
  bool Next(trainyard::v1::JobEvent* event, std::chrono::milliseconds timeout);
  bool ended() const;
  // For a transport that cannot wait in Next: calls `wake` after every Push and End until
  // ClearWake, and once at once. `wake` runs outside this watcher's lock (it may call Next) but
  // maybe under the coordinator's (it must not call the Coordinator, and must return at once).
  void SetWake(std::function<void()> wake);
  // Once it returns, the wake runs no more.
  void ClearWake();

  // For the coordinator.
  void Push(trainyard::v1::JobEvent event);
  void End();

 private:
  void Wake();

  static constexpr size_t kMaxQueued = 10000;  // beyond it, step metrics are dropped
  std::mutex wake_mu_;                         // held while wake_ runs; taken before mu_
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<trainyard::v1::JobEvent> queue_;
  bool ended_ = false;
};

class Coordinator {
 public:
  // Loads every job from `store` (a restarted coordinator carries on where it stopped).
  static StatusOr<std::unique_ptr<Coordinator>> Create(std::unique_ptr<JobStore> store,
                                                       const Clock* clock,
                                                       CoordinatorOptions options = {});
  ~Coordinator();

  // ---- Clients ----
  // InvalidArgument listing every problem of the spec (also as field violations);
  // FailedPrecondition when it can never fit the alive workers. The job is PENDING
  // (committed) when this returns. `actor` names the client in events and logs ("" if none).
  StatusOr<trainyard::v1::Job> Submit(const std::string& spec_json, const std::string& actor = "");
  // InvalidArgument for an empty id; NotFound for an unknown one (also below).
  StatusOr<trainyard::v1::Job> GetJob(const std::string& id);
  // InvalidArgument for a page size, page token or state outside what the API allows.
  StatusOr<trainyard::v1::ListJobsResponse> ListJobs(const trainyard::v1::ListJobsRequest& req);
  StatusOr<trainyard::v1::Job> Cancel(const std::string& id, bool checkpoint,
                                      const std::string& actor = "");
  // from_seq 0: the job's current state first, then its events until it ends; from_seq n:
  // the stored events from seq n, then the new ones (service.proto, WatchJob).
  StatusOr<std::shared_ptr<Watcher>> Watch(const std::string& id, int64_t from_seq = 0);
  std::vector<trainyard::v1::WorkerInfo> ListWorkers();

  // ---- Workers ----
  StatusOr<trainyard::v1::RegisterWorkerResponse> RegisterWorker(
      const trainyard::v1::RegisterWorkerRequest& req);
  // NotFound when the worker must register (again) first. Queues a HeartbeatAck for the
  // worker (one at most waits in its outbox).
  Status Heartbeat(const trainyard::v1::WorkerHeartbeat& hb);
  // Takes the commands waiting for worker `name` (none: empty), in the order they were queued;
  // it does not wait (SetCommandsWake says when to call it). Aborted when `name` registered
  // again since `incarnation` (a newer stream serves it now) or is not alive.
  StatusOr<std::vector<trainyard::v1::WorkerCommand>> TakeCommands(const std::string& name,
                                                                   int64_t incarnation);
  // Calls `wake` whenever a command is queued for `name`, and when `name` registers again or is
  // declared lost (TakeCommands then says Aborted), until ClearCommandsWake or a newer
  // SetCommandsWake for the name; and once at once if commands wait already. `wake` runs under the
  // coordinator's lock: it must return at once and must not call the Coordinator (it hands the
  // TakeCommands to another thread). Aborted as TakeCommands when `incarnation` is not current.
  Status SetCommandsWake(const std::string& name, int64_t incarnation, std::function<void()> wake);
  // Removes the wake that SetCommandsWake set for this incarnation (not a newer one's); once it
  // returns, that wake runs no more.
  void ClearCommandsWake(const std::string& name, int64_t incarnation);
  // The worker's incarnation now; NotFound when it is not registered.
  StatusOr<int64_t> Incarnation(const std::string& name);
  // FailedPrecondition "metrics report of job J attempt 1 refused: attempt 1 is over; the job
  // is at attempt 2" for a report of an attempt other than the current one (the first per job
  // attempt is logged, and an abort of that attempt sent to the reporting worker); NotFound
  // for an unknown job. Step reports of the current attempt once it ended (the job restarting
  // or over) are dropped silently: no other attempt reports beside them.
  Status ReportMetrics(const trainyard::v1::MetricsReport& report);
  Rendezvous& rendezvous() { return rendezvous_; }

  // Liveness, hangs, stragglers, timeouts, then scheduling.
  void Tick();

  // For the Prometheus endpoint.
  struct JobGauges {
    std::string id;
    trainyard::v1::JobState state;
    trainyard::v1::StepMetrics last_step;
    int restarts = 0;
    bool hung = false;   // the last attempt ended with a hang diagnosis
    int stragglers = 0;  // ranks flagged now (0 unless RUNNING)
  };
  struct Snapshot {
    std::map<trainyard::v1::JobState, int> jobs_by_state;
    int queue_length = 0;  // PENDING and RESTARTING
    int workers_alive = 0;
    int workers_known = 0;
    std::vector<JobGauges> jobs;  // jobs not yet final, and final ones of the last hour
    int64_t stale_reports = 0;    // metrics reports refused as a stale attempt's, ever
  };
  Snapshot GetSnapshot();

  const CoordinatorOptions& options() const { return options_; }

 private:
  struct RankRuntime {
    trainyard::v1::RankPlacement placement;
    trainyard::v1::RankStatus status;
    bool reported = false;  // in a heartbeat (or the registration) of its worker
    Clock::TimePoint received{};
    trainyard::v1::StepMetrics last_step;
  };
  struct Entry {
    trainyard::v1::Job job;
    spec::JobSpec spec;
    GangRequest gang;  // GangOf(id, spec), made once: the spec never changes
    int64_t next_event_seq = 1;
    std::vector<std::weak_ptr<Watcher>> watchers;
    // The last attempt's ranks, while they run or are being stopped.
    std::map<int, RankRuntime> ranks;
    Clock::TimePoint attempt_started{};
    bool stopping = false;  // the attempt is over; waiting for its ranks to exit
    Clock::TimePoint stop_deadline{};
    std::unique_ptr<StragglerDetector> stragglers;
    SlowLinkDetector slow_links{2};  // Note [Slow links] in health.h; the spec's factor
    Clock::TimePoint last_persist{};
    Clock::TimePoint last_step_at{};
    double step_seconds = 0;              // smoothed wall time between rank 0's steps
    std::set<int> stale_attempts_logged;  // attempts whose refused reports were logged
    // Elastic jobs (Note [Regroups]): when the quorum window that a rank's `regrouping`
    // report opened closes ({}: none open), and whether the attempt has completed a step.
    Clock::TimePoint regroup_deadline{};
    bool stepped = false;
  };

  Coordinator(std::unique_ptr<JobStore> store, const Clock* clock, CoordinatorOptions options);
  Status Load();

  // All under mu_.
  Entry* Find(const std::string& id);
  int64_t NowMs() const;
  Status Commit(Entry& e, const trainyard::v1::JobEvent* event);
  // Stores (unless a step) and publishes `event` to the job's watchers.
  Status Emit(Entry& e, trainyard::v1::JobEvent event);
  Status Transition(Entry& e, trainyard::v1::JobState to, const std::string& reason,
                    const std::string& actor = "");
  bool ActiveAttempt(const Entry& e) const;  // SCHEDULED or RUNNING
  void StartAttempt(Entry& e, std::vector<trainyard::v1::RankPlacement> ranks);
  // The part of StartAttempt that a regroup shares: a new attempt of `ranks`, its rank table,
  // detectors and rendezvous scope (no state change, nothing sent).
  trainyard::v1::Attempt& BeginAttempt(Entry& e, std::vector<trainyard::v1::RankPlacement> ranks);
  // Queues the current attempt's assignment of `worker`'s ranks (a repeat starts nothing).
  void ResendAssignment(Entry& e, const std::string& worker);
  // Ends the current attempt: stops its ranks and restarts the job or fails it.
  void AbortAttempt(Entry& e, const std::string& reason, bool restartable = true);
  // How a rank's failure ends an attempt (coordinator_faults.cc).
  struct RankFailure {
    std::string reason;
    int exit_code = 0;  // the rank's; 0 for a hang or an exit 0 before the last step
    int64_t step = 0;   // the step the rank had reached; 0: unknown
    bool restartable = true;
  };
  // Records `f` in the attempt (Attempt.failed_exit_code, failed_step) and aborts it; fails the
  // job instead of restarting it when the previous attempt failed the same way (exit code) at
  // the same known step: a deterministic failure, which a restart would only repeat.
  void FailAttempt(Entry& e, const RankFailure& f);
  void EndAttempt(Entry& e, const std::string& reason);
  void StopRanks(Entry& e, bool checkpoint, const std::string& reason, bool cancel);
  void Send(const std::string& worker, trainyard::v1::WorkerCommand command);
  // Refuses a report of an attempt that is not e's current one (ReportMetrics).
  Status RefuseStaleReport(Entry& e, const trainyard::v1::MetricsReport& report);
  // ReportMetrics of a step of e's current attempt, from rank `r`; `late`: of the attempt a
  // regroup just ended (LateStepOfRegroup), only published.
  Status OnStepReport(Entry& e, RankRuntime& r, const trainyard::v1::StepMetrics& step,
                      bool late = false);
  // Runs worker `name`'s commands wake, if any; `drop` removes it after (its stream ends).
  void WakeWorker(const std::string& name, bool drop);
  void OnRankStatus(const std::string& worker, const trainyard::v1::RankStatus& s);
  // A rank of the running attempt exited: the job succeeds once every rank exited 0 at its
  // last step; an exit 0 before the last step (unasked) or non-zero fails the attempt
  // (coordinator_faults.cc, as CheckHang).
  void OnRankExit(Entry& e, RankRuntime& r);
  void MaybeRunning(Entry& e);  // SCHEDULED -> RUNNING once every rank was heard from
  void CheckStopped(Entry& e);
  void CheckLiveness(Entry& e);
  void CheckHang(Entry& e);
  // Makes a collective report of `views` (CheckHang's) when a rank waits long, a collective
  // failed, or `hang` (Note [Collective flight recorder] in collective_report.h).
  void CheckCollectives(Entry& e, const std::vector<RankView>& views, bool hang);
  void CheckStragglers(Entry& e);
  // Elastic jobs (coordinator_elastic.cc, Note [Regroups]). Whether e regroups instead of
  // aborting: spec::IsElastic, RUNNING and not cancelled.
  bool Elastic(const Entry& e) const;
  // The ranks of the current attempt, but `except`, that have not exited and whose workers
  // are alive.
  std::vector<int> LiveRanks(const Entry& e, int except = -1) const;
  // Continues the running attempt with `members` (ranks of it, renumbered 0..m-1 in order)
  // and `added` (new ranks after them) as a new attempt; false (nothing done) when that is
  // fewer than min_world_size ranks: the caller aborts as without elasticity.
  bool Regroup(Entry& e, const std::vector<int>& members,
               std::vector<trainyard::v1::RankPlacement> added, const std::string& why);
  // A rank's failure (a lost worker, an exit, a hang): the others regroup, or false.
  bool RegroupWithout(Entry& e, int rank, const std::string& why);
  // A step the members finished in the attempt a regroup just ended, reported once it had
  // (ReportMetrics): the rank's number in the current attempt when the report is of a later
  // step than the job's last and its rank is a member; -1: a stale report, refused.
  int LateStepOfRegroup(const Entry& e, const trainyard::v1::MetricsReport& report) const;
  void OnRegroupingReport(Entry& e);  // a rank reported `regrouping`: opens the quorum window
  void CheckRegroup(Entry& e);        // closes it: the ranks that reported regroup
  void MaybeGrow(Entry& e);           // free slots: new ranks join at a step boundary
  // A regrouped attempt some of whose ranks have not reported yet: their last reports speak of
  // the old group, so no hang verdict until they do.
  bool RegroupForming(const Entry& e) const;
  // Records the round trips rank `r` measured to other hosts of its job (Note [Slow links]).
  void AddLinks(Entry& e, const RankRuntime& r);
  void EmitSlowLink(Entry& e, const SlowLinkDetector::Change& c);
  void Schedule();
  std::vector<WorkerCapacity> FreeCapacity(bool gpu) const;
  trainyard::v1::Job ForClient(const Entry& e, bool summary) const;

  std::unique_ptr<JobStore> store_;
  const Clock* clock_;
  const CoordinatorOptions options_;
  Clock::TimePoint started_;
  Rendezvous rendezvous_;

  std::mutex mu_;
  WorkerRegistry registry_;
  std::map<std::string, std::unique_ptr<Entry>> jobs_;
  std::vector<std::string> order_;  // job ids in submit order
  std::map<std::string, std::deque<trainyard::v1::WorkerCommand>> outbox_;
  struct CommandsWake {
    int64_t incarnation = 0;
    std::function<void()> wake;
  };
  std::map<std::string, CommandsWake> wakes_;  // by worker name (SetCommandsWake)
  int64_t next_job_number_ = 1;
  int64_t stale_reports_ = 0;  // Snapshot::stale_reports
  // Workers whose ranks a regroup left out (lost, silent, failed), until when elastic jobs do
  // not grow onto them: one that died is not declared lost before the heartbeat timeout.
  // Registering again clears it.
  std::map<std::string, Clock::TimePoint> suspect_;
};

// Adds a refused report's reason (ReportMetrics' FailedPrecondition) to a ReportMetrics
// stream's response, once per distinct reason and at most 16 (ReportMetricsResponse.refused).
void AddRefusal(trainyard::v1::ReportMetricsResponse* response, const Status& refused);

// The command that makes a worker stop (SIGKILL) its ranks of `attempt` of job `job_id`.
trainyard::v1::WorkerCommand AbortCommand(const std::string& job_id, int attempt,
                                          const std::string& reason);

const char* JobStateName(trainyard::v1::JobState state);
// "cancelled", or "cancelled by <client>".
std::string CancelReason(const trainyard::v1::Job& job);
bool IsFinal(trainyard::v1::JobState state);

}  // namespace trainyard::server
