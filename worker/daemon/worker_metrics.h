// The worker daemon's Prometheus metrics: its slots and ranks, and per rank (labels job,
// rank) the step, loss, step time split by phase, all-reduce bandwidth, resident memory and
// tensor memory.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <set>
#include <tuple>

#include "common/json.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::daemon {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry, int slots);
  // A rank's "step" report line (rank.h).
  void OnStep(const trainyard::v1::RankStatus& who, const Json& step);
  // Running ranks' memory and the counts; exits counted once each. A rank's series go when
  // the supervisor forgets it (10 minutes after its exit).
  void OnStatuses(const std::vector<trainyard::v1::RankStatus>& ranks);
  void SetConnected(bool connected) { connected_.Set(connected ? 1 : 0); }

 private:
  prometheus::Gauge& slots_;
  prometheus::Gauge& running_;
  prometheus::Gauge& connected_;
  prometheus::Family<prometheus::Counter>& exits_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& phase_seconds_;
  prometheus::Family<prometheus::Gauge>& step_seconds_;
  prometheus::Family<prometheus::Gauge>& bandwidth_;
  prometheus::Family<prometheus::Gauge>& memory_;
  prometheus::Family<prometheus::Gauge>& tensor_memory_;
  prometheus::Family<prometheus::Counter>& steps_total_;
  std::map<std::tuple<std::string, int, int>, bool> counted_exits_;
  std::set<std::pair<std::string, int>> exported_;  // (job, rank) with series now
};

}  // namespace trainyard::daemon
