#include "server/coordinator_metrics.h"

namespace trainyard::server {
namespace {

prometheus::Family<prometheus::Gauge>& Gauge(prometheus::Registry& r, const char* name,
                                             const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

// trainyard_job_state's labels: a series per job and state (kube-state-metrics' way), so an
// alert can name the job (trainyard_job_state{state="FAILED"} == 1).
prometheus::Labels StateLabels(const std::string& job, trainyard::v1::JobState state) {
  return {{"job", job}, {"state", JobStateName(state)}};
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& r)
    : jobs_(Gauge(r, "trainyard_jobs", "Jobs known to the coordinator, by state")),
      queue_length_(
          Gauge(r, "trainyard_queue_length", "Jobs waiting for capacity (PENDING, RESTARTING)")
              .Add({})),
      workers_alive_(Gauge(r, "trainyard_workers_alive", "Workers heartbeating").Add({})),
      workers_registered_(
          Gauge(r, "trainyard_workers_registered", "Workers ever registered with this coordinator")
              .Add({})),
      state_(Gauge(r, "trainyard_job_state", "1 for a job's current state, 0 for the others")),
      step_(Gauge(r, "trainyard_job_step", "Optimizer steps a job has completed")),
      total_steps_(Gauge(r, "trainyard_job_total_steps", "A job's length in steps")),
      loss_(
          Gauge(r, "trainyard_job_loss", "Training loss of a job's latest step (mean over ranks)")),
      samples_per_second_(Gauge(r, "trainyard_job_samples_per_second",
                                "Training throughput of a job's latest step, all ranks")),
      tokens_per_second_(Gauge(r, "trainyard_job_tokens_per_second",
                               "Training throughput of a job's latest step in tokens, all ranks")),
      eta_(Gauge(r, "trainyard_job_eta_seconds", "Estimated time left for a job")),
      restarts_(prometheus::BuildCounter()
                    .Name("trainyard_job_restarts_total")
                    .Help("Attempts of a job that were aborted and restarted")
                    .Register(r)),
      hung_(Gauge(r, "trainyard_job_hung",
                  "1 when a job's latest attempt was ended by a hang diagnosis")),
      stragglers_(Gauge(r, "trainyard_job_stragglers", "Ranks of a job flagged as stragglers now")),
      heartbeat_latency_(
          prometheus::BuildHistogram()
              .Name("trainyard_heartbeat_latency_seconds")
              .Help("From a worker sending a heartbeat to the coordinator applying it")
              .Register(r)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001,
                                                               0.0025, 0.005, 0.01, 0.025, 0.05,
                                                               0.1, 0.25, 0.5, 1, 2.5})),
      stale_reports_(prometheus::BuildCounter()
                         .Name("trainyard_stale_reports_total")
                         .Help("Metrics reports refused because their job attempt is not the "
                               "current one (a stale attempt, e.g. of a partitioned worker)")
                         .Register(r)
                         .Add({})) {}

void CoordinatorMetrics::Update(const Coordinator::Snapshot& s) {
  for (int st = trainyard::v1::PENDING; st <= trainyard::v1::CANCELLED; ++st) {
    const auto state = static_cast<trainyard::v1::JobState>(st);
    auto it = s.jobs_by_state.find(state);
    jobs_.Add({{"state", JobStateName(state)}}).Set(it == s.jobs_by_state.end() ? 0 : it->second);
  }
  queue_length_.Set(s.queue_length);
  workers_alive_.Set(s.workers_alive);
  workers_registered_.Set(s.workers_known);
  if (static_cast<double>(s.stale_reports) > stale_reports_.Value()) {
    stale_reports_.Increment(static_cast<double>(s.stale_reports) - stale_reports_.Value());
  }
  std::set<std::string> now;
  for (const Coordinator::JobGauges& j : s.jobs) now.insert(j.id);
  for (const std::string& id : exported_) {
    if (now.count(id)) continue;
    const prometheus::Labels job{{"job", id}};
    for (auto* family : {&step_, &total_steps_, &loss_, &samples_per_second_, &tokens_per_second_,
                         &eta_, &hung_, &stragglers_}) {
      family->Remove(&family->Add(job));
    }
    restarts_.Remove(&restarts_.Add(job));
    for (int st = trainyard::v1::PENDING; st <= trainyard::v1::CANCELLED; ++st) {
      state_.Remove(&state_.Add(StateLabels(id, static_cast<trainyard::v1::JobState>(st))));
    }
  }
  exported_ = std::move(now);
  for (const Coordinator::JobGauges& j : s.jobs) {
    const prometheus::Labels job{{"job", j.id}};
    for (int st = trainyard::v1::PENDING; st <= trainyard::v1::CANCELLED; ++st) {
      const auto state = static_cast<trainyard::v1::JobState>(st);
      state_.Add(StateLabels(j.id, state)).Set(state == j.state ? 1 : 0);
    }
    step_.Add(job).Set(static_cast<double>(j.last_step.step()));
    total_steps_.Add(job).Set(static_cast<double>(j.last_step.total_steps()));
    loss_.Add(job).Set(j.last_step.loss());
    samples_per_second_.Add(job).Set(j.last_step.samples_per_second());
    tokens_per_second_.Add(job).Set(j.last_step.tokens_per_second());
    eta_.Add(job).Set(IsFinal(j.state) ? 0 : j.last_step.eta_seconds());
    // The record only grows: the counter takes what it gained since the last Update.
    prometheus::Counter& restarts = restarts_.Add(job);
    if (j.restarts > restarts.Value()) restarts.Increment(j.restarts - restarts.Value());
    hung_.Add(job).Set(j.hung ? 1 : 0);
    stragglers_.Add(job).Set(j.stragglers);
  }
}

}  // namespace trainyard::server
