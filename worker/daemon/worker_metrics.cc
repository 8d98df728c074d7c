#include "worker/daemon/worker_metrics.h"

#include <algorithm>

namespace trainyard::daemon {
namespace {

prometheus::Family<prometheus::Gauge>& Gauge(prometheus::Registry& r, const char* name,
                                             const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

prometheus::Labels RankLabels(const trainyard::v1::RankStatus& s) {
  return {{"job", s.job_id()}, {"rank", std::to_string(s.rank())}};
}

double Number(const Json& j, const char* key) {
  const Json* v = j.Find(key);
  return v && v->is_number() ? v->number_value() : 0;
}

// trainyard_rank_phase_seconds's phases, each from the step report's <phase>_seconds, and
// trainyard_rank_tensor_memory_bytes's kinds, each from its memory_<kind>_bytes.
constexpr const char* kPhases[] = {"data", "forward", "backward", "allreduce_wait", "optimizer"};
constexpr const char* kMemoryKinds[] = {"allocated", "reserved", "peak"};

// `labels` and key=value.
prometheus::Labels With(prometheus::Labels labels, const char* key, const char* value) {
  labels[key] = value;
  return labels;
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r, int slots)
    : slots_(Gauge(r, "trainyard_worker_slots", "CPU slots this worker offers").Add({})),
      running_(Gauge(r, "trainyard_worker_ranks_running", "Rank processes running").Add({})),
      connected_(Gauge(r, "trainyard_worker_connected", "1 while registered with the coordinator")
                     .Add({})),
      exits_(prometheus::BuildCounter()
                 .Name("trainyard_worker_rank_exits_total")
                 .Help("Rank processes that exited, by outcome")
                 .Register(r)),
      step_(Gauge(r, "trainyard_rank_step", "Steps a rank has completed")),
      loss_(Gauge(r, "trainyard_rank_loss", "Loss of a rank's latest step")),
      phase_seconds_(Gauge(r, "trainyard_rank_phase_seconds",
                           "Wall time of a rank's latest step by phase (data, forward, backward, "
                           "allreduce_wait, optimizer)")),
      step_seconds_(
          Gauge(r, "trainyard_rank_step_duration_seconds", "Wall time of a rank's latest step")),
      bandwidth_(Gauge(r, "trainyard_rank_allreduce_bus_bandwidth_bytes_per_second",
                       "Gradient all-reduce bus bandwidth of a rank's latest step")),
      memory_(Gauge(r, "trainyard_rank_memory_bytes", "Resident memory of a rank process")),
      tensor_memory_(Gauge(r, "trainyard_rank_tensor_memory_bytes",
                           "Tensor memory on a rank's training device after its latest step: in "
                           "tensors (allocated), obtained in all (reserved), the most in tensors "
                           "since the step before (peak)")),
      steps_total_(prometheus::BuildCounter()
                       .Name("trainyard_rank_steps_total")
                       .Help("Steps reported by a rank")
                       .Register(r)) {
  slots_.Set(slots);
  // Both outcomes exist from the start, at 0, so that increase() and rate() over them read 0
  // before the first exit rather than nothing.
  exits_.Add({{"outcome", "success"}});
  exits_.Add({{"outcome", "failure"}});
}

void WorkerMetrics::OnStep(const trainyard::v1::RankStatus& who, const Json& m) {
  const prometheus::Labels labels = RankLabels(who);
  step_.Add(labels).Set(Number(m, "step"));
  loss_.Add(labels).Set(Number(m, "loss"));
  double total = 0;
  for (const char* phase : kPhases) {
    const double s = Number(m, (std::string(phase) + "_seconds").c_str());
    total += s;
    phase_seconds_.Add(With(labels, "phase", phase)).Set(s);
  }
  step_seconds_.Add(labels).Set(total);
  bandwidth_.Add(labels).Set(Number(m, "allreduce_bus_bandwidth"));
  for (const char* kind : kMemoryKinds) {
    tensor_memory_.Add(With(labels, "kind", kind))
        .Set(Number(m, ("memory_" + std::string(kind) + "_bytes").c_str()));
  }
  steps_total_.Add(labels).Increment();
}

void WorkerMetrics::OnStatuses(const std::vector<trainyard::v1::RankStatus>& ranks) {
  std::set<std::pair<std::string, int>> now;
  for (const auto& s : ranks) now.insert({s.job_id(), s.rank()});
  for (const auto& [job, rank] : exported_) {
    if (now.count({job, rank})) continue;
    const prometheus::Labels labels{{"job", job}, {"rank", std::to_string(rank)}};
    for (auto* family : {&step_, &loss_, &step_seconds_, &bandwidth_, &memory_}) {
      family->Remove(&family->Add(labels));
    }
    steps_total_.Remove(&steps_total_.Add(labels));
    for (const char* phase : kPhases) {
      phase_seconds_.Remove(&phase_seconds_.Add(With(labels, "phase", phase)));
    }
    for (const char* kind : kMemoryKinds) {
      tensor_memory_.Remove(&tensor_memory_.Add(With(labels, "kind", kind)));
    }
  }
  exported_ = std::move(now);
  for (auto it = counted_exits_.begin(); it != counted_exits_.end();) {
    const bool known = std::any_of(ranks.begin(), ranks.end(), [&](const auto& s) {
      return std::make_tuple(s.job_id(), s.attempt(), s.rank()) == it->first;
    });
    it = known ? std::next(it) : counted_exits_.erase(it);
  }
  int running = 0;
  for (const auto& s : ranks) {
    if (!s.exited()) {
      ++running;
      memory_.Add(RankLabels(s)).Set(static_cast<double>(s.memory_bytes()));
      continue;
    }
    bool& counted = counted_exits_[{s.job_id(), s.attempt(), s.rank()}];
    if (counted) continue;
    counted = true;
    exits_.Add({{"outcome", s.exit_code() == 0 ? "success" : "failure"}}).Increment();
  }
  running_.Set(running);
}

}  // namespace trainyard::daemon
