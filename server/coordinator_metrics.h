// The coordinator's Prometheus metrics (served on /metrics by the coordinator's main): jobs by
// state, queue length, workers, metrics reports refused as a stale attempt's (a counter), and
// per job its state (a series per state, 1 for the current
// one), step, loss, throughput, ETA, restarts (a counter), and the hang and straggler flags.
// Update() copies a Coordinator::Snapshot into the gauges, and adds to a job's restart counter
// what its record gained since (so the counter equals the record's count, also after a
// coordinator restart); a job's series go when it leaves the snapshot (an hour after it ended).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <set>
#include <string>

#include "server/coordinator.h"

namespace trainyard::server {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);
  void Update(const Coordinator::Snapshot& s);
  // From sending a heartbeat to the coordinator having applied it. Thread-safe.
  void ObserveHeartbeatLatency(double seconds) { heartbeat_latency_.Observe(seconds); }

 private:
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Gauge& queue_length_;
  prometheus::Gauge& workers_alive_;
  prometheus::Gauge& workers_registered_;
  prometheus::Family<prometheus::Gauge>& state_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Gauge>& total_steps_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& samples_per_second_;
  prometheus::Family<prometheus::Gauge>& tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& eta_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Gauge>& hung_;
  prometheus::Family<prometheus::Gauge>& stragglers_;
  prometheus::Histogram& heartbeat_latency_;
  prometheus::Counter& stale_reports_;  // follows Snapshot::stale_reports
  std::set<std::string> exported_;      // jobs with series now
};

}  // namespace trainyard::server
