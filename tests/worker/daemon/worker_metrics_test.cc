// WorkerMetrics against a real prometheus-cpp registry: a rank's step report becomes its
// series, tensor memory by kind among them, and they go when the rank is forgotten.
#include "worker/daemon/worker_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace trainyard::daemon {
namespace {

// name{label=value,...} -> value, for every gauge sample in the registry.
std::map<std::string, double> Gauges(prometheus::Registry& r) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : r.Collect()) {
    for (const prometheus::ClientMetric& m : f.metric) {
      std::string key = f.name + "{";
      for (const prometheus::ClientMetric::Label& l : m.label) key += l.name + "=" + l.value + ",";
      out[key + "}"] = m.gauge.value;
    }
  }
  return out;
}

TEST(WorkerMetricsTest, AStepsTensorMemoryIsExportedByKindUntilTheRankIsForgotten) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, 1);
  v1::RankStatus rank;
  rank.set_job_id("j1");
  rank.set_rank(0);
  StatusOr<Json> step = Json::Parse(
      R"({"type": "step", "step": 3, "loss": 1.5, "memory_allocated_bytes": 1000,
          "memory_reserved_bytes": 4000, "memory_peak_bytes": 3000})");
  ASSERT_TRUE(step.ok());
  metrics.OnStep(rank, *step);
  metrics.OnStatuses({rank});
  std::map<std::string, double> g = Gauges(registry);
  const std::string series = "trainyard_rank_tensor_memory_bytes{job=j1,kind=";
  EXPECT_EQ(g[series + "allocated,rank=0,}"], 1000);
  EXPECT_EQ(g[series + "reserved,rank=0,}"], 4000);
  EXPECT_EQ(g[series + "peak,rank=0,}"], 3000);
  EXPECT_EQ(g["trainyard_rank_step{job=j1,rank=0,}"], 3);

  metrics.OnStatuses({});  // the supervisor forgot the rank
  for (const auto& [key, value] : Gauges(registry)) {
    EXPECT_EQ(key.find("job=j1"), std::string::npos) << key << " outlived its rank";
  }
}

}  // namespace
}  // namespace trainyard::daemon
