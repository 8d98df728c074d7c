#include "server/coordinator_metrics.h"

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

// The family `name` as a scrape would show it, or nullptr.
const prometheus::MetricFamily* FindFamily(const std::vector<prometheus::MetricFamily>& all,
                                           const std::string& name) {
  for (const prometheus::MetricFamily& f : all) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The value of `name`{job="<job>"} in `registry`, or nullopt when it has no such series.
std::optional<double> RestartsOf(prometheus::Registry& registry, const std::string& job) {
  const std::vector<prometheus::MetricFamily> all = registry.Collect();
  const prometheus::MetricFamily* f = FindFamily(all, "trainyard_job_restarts_total");
  if (f == nullptr) return std::nullopt;
  EXPECT_EQ(f->type, prometheus::MetricType::Counter);
  for (const prometheus::ClientMetric& m : f->metric) {
    for (const prometheus::ClientMetric::Label& l : m.label) {
      if (l.name == "job" && l.value == job) return m.counter.value;
    }
  }
  return std::nullopt;
}

Coordinator::Snapshot WithJob(const std::string& id, int restarts) {
  Coordinator::Snapshot s;
  Coordinator::JobGauges g;
  g.id = id;
  g.state = trainyard::v1::RUNNING;
  g.restarts = restarts;
  s.jobs.push_back(g);
  return s;
}

TEST(CoordinatorMetricsTest, RestartsAreACounterThatFollowsTheJobRecord) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  // A coordinator that restarted finds the job with 2 restarts already: the counter says so.
  metrics.Update(WithJob("t-1", 2));
  EXPECT_EQ(RestartsOf(registry, "t-1"), 2.0);
  metrics.Update(WithJob("t-1", 2));
  EXPECT_EQ(RestartsOf(registry, "t-1"), 2.0) << "counted the same restarts twice";
  metrics.Update(WithJob("t-1", 3));
  EXPECT_EQ(RestartsOf(registry, "t-1"), 3.0);
  EXPECT_EQ(FindFamily(registry.Collect(), "trainyard_job_restarts"), nullptr)
      << "the old gauge is still exported";
}

TEST(CoordinatorMetricsTest, AJobsRestartCounterGoesWithItsOtherSeries) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  metrics.Update(WithJob("t-1", 1));
  ASSERT_EQ(RestartsOf(registry, "t-1"), 1.0);
  metrics.Update(WithJob("t-2", 0));  // t-1 left the snapshot (an hour after it ended)
  EXPECT_EQ(RestartsOf(registry, "t-1"), std::nullopt);
  EXPECT_EQ(RestartsOf(registry, "t-2"), 0.0);
  const std::vector<prometheus::MetricFamily> all = registry.Collect();
  const prometheus::MetricFamily* step = FindFamily(all, "trainyard_job_step");
  ASSERT_NE(step, nullptr);
  ASSERT_EQ(step->metric.size(), 1u);
  EXPECT_EQ(step->metric[0].label[0].value, "t-2");
}

}  // namespace
}  // namespace trainyard::server
