// Acceptance of deploy/monitoring against a real Prometheus: Debian's prometheus, configured by
// deploy/monitoring/prometheus.yml (on the test's ports, every second) with alerts.yml, scrapes
// a real coordinator and two workers on loopback while they train a small MLP on
// Fashion-MNIST. Through Prometheus' HTTP API, while the job runs, every query of the Grafana
// dashboard returns data, every alert expression evaluates and every metric it reads has
// series, and every rule group is healthy; after the job is cancelled too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "client/yaml.h"
#include "common/json.h"
#include "tests/testing/cluster.h"
#include "tests/testing/prometheus.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::PrometheusServer;
using testing::TempDir;
using testing::WaitUntil;

const std::string kMonitoring = std::string(TY_SOURCE_DIR) + "/deploy/monitoring";

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

// deploy/monitoring/prometheus.yml as it is (its scrape jobs' names, honor_labels and every
// other setting), with the test's targets, alerts.yml by its full path, and a 1 s interval.
StatusOr<std::string> ScrapeConfig(const std::string& coordinator,
                                   const std::vector<std::string>& workers) {
  ASSIGN_OR_RETURN(
      Json config,
      client::ParseYaml(testing::ReadFile(kMonitoring + "/prometheus.yml"), "prometheus.yml"));
  config.Set("global", Json::Object({{"scrape_interval", "1s"},
                                     {"scrape_timeout", "1s"},
                                     {"evaluation_interval", "1s"}}));
  config.Set("rule_files", Json::Array({kMonitoring + "/alerts.yml"}));
  const Json* jobs = config.Find("scrape_configs");
  if (jobs == nullptr) return NotFoundError("prometheus.yml has no scrape_configs");
  Json::Items replaced;
  std::set<std::string> names;
  for (Json job : jobs->items()) {
    const std::string name = job.Find("job_name")->string_value();
    Json targets = Json::Array();
    if (name == "trainyard-coordinator") {
      targets.Append(coordinator);
    } else if (name == "trainyard-worker") {
      for (const std::string& w : workers) targets.Append(w);
    } else {
      return InvalidArgumentError("prometheus.yml: scrape job " + name + " is not one of ours");
    }
    names.insert(name);
    job.Set("static_configs", Json::Array({Json::Object({{"targets", std::move(targets)}})}));
    replaced.push_back(std::move(job));
  }
  if (names.size() != 2) return NotFoundError("prometheus.yml lacks a trainyard scrape job");
  config.Set("scrape_configs", Json::Array(std::move(replaced)));
  return config.Dump(2);  // JSON is YAML
}

StatusOr<Json> ReadJsonFile(const std::string& path) {
  return Json::Parse(testing::ReadFile(path));
}

// Every target's expr of the dashboard's panels, rows' nested panels included.
void CollectExprs(const Json& panels, std::vector<std::string>* out) {
  for (const Json& p : panels.items()) {
    if (const Json* nested = p.Find("panels")) CollectExprs(*nested, out);
    const Json* targets = p.Find("targets");
    if (targets == nullptr) continue;
    for (const Json& t : targets->items()) out->push_back(t.Find("expr")->string_value());
  }
}

// `expr` as Grafana sends it with job `job` chosen and each of `ranks` in turn (the repeated
// panel); $__rate_interval as Grafana computes it for a 1 s scrape interval.
std::vector<std::string> Expand(std::string expr, const std::string& job,
                                const std::vector<std::string>& ranks) {
  ReplaceAll(&expr, "$__rate_interval", "4s");
  ReplaceAll(&expr, "$job", job);
  if (expr.find("$rank") == std::string::npos) return {expr};
  std::vector<std::string> out;
  for (const std::string& r : ranks) {
    std::string e = expr;
    ReplaceAll(&e, "$rank", r);
    out.push_back(e);
  }
  return out;
}

// True when a query's result holds a sample that is a number (not NaN: a histogram quantile
// without traffic, a ratio of zeros).
bool HasNumber(const Json& result) {
  for (const Json& sample : result.items()) {
    const Json* value = sample.is_object() ? sample.Find("value") : nullptr;
    if (value != nullptr && value->size() == 2 && (*value)[1].string_value() != "NaN") return true;
  }
  return false;
}

// The queries `query` answers with no numeric sample (or an error), each with why.
std::vector<std::string> Empty(PrometheusServer& p, const std::vector<std::string>& queries) {
  std::vector<std::string> empty;
  for (const std::string& q : queries) {
    StatusOr<Json> r = p.Query(q);
    if (!r.ok())
      empty.push_back(q + ": " + std::string(r.status().message()));
    else if (!HasNumber(*r))
      empty.push_back(q + ": no data");
  }
  return empty;
}

// The metric names (trainyard_*) `expr` reads, but for those under absent() (which mean their
// absence).
std::set<std::string> MetricNames(const std::string& expr) {
  std::set<std::string> names;
  const std::string prefix = "trainyard_";
  for (size_t at = expr.find(prefix); at != std::string::npos; at = expr.find(prefix, at + 1)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(expr[at - 1])) || expr[at - 1] == '_'))
      continue;
    size_t end = at;
    while (end < expr.size() &&
           (std::isalnum(static_cast<unsigned char>(expr[end])) || expr[end] == '_'))
      ++end;
    const size_t absent = expr.rfind("absent(", at);
    if (absent != std::string::npos && expr.find(')', absent) > at) continue;
    names.insert(expr.substr(at, end - at));
  }
  return names;
}

std::string Lines(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += "  " + s + "\n";
  return out;
}

// Label `label`'s values over the series of a label_values(selector, label) variable query.
std::vector<std::string> LabelValues(PrometheusServer& p, std::string query,
                                     const std::string& job) {
  ReplaceAll(&query, "$job", job);
  const size_t open = query.find('('), comma = query.rfind(',');
  const std::string selector = query.substr(open + 1, comma - open - 1);
  const std::string label = query.substr(comma + 2, query.size() - comma - 3);
  std::vector<std::string> values;
  StatusOr<Json> r = p.Query("count by (" + label + ") (" + selector + ")");
  if (!r.ok()) return values;
  for (const Json& s : r->items()) values.push_back(s.Find("metric")->Find(label)->string_value());
  return values;
}

// True once every group of `names` is loaded, each of its `rules` rules evaluated without error
// and none firing (a healthy cluster, a job that succeeded); else `why` says what is not so yet.
bool RulesHealthy(PrometheusServer& p, const std::set<std::string>& names, size_t rules,
                  std::string* why) {
  StatusOr<Json> data = p.Api("/api/v1/rules");
  if (!data.ok()) {
    *why = std::string(data.status().message());
    return false;
  }
  std::set<std::string> loaded;
  size_t ok = 0;
  *why = "";
  for (const Json& g : data->Find("groups")->items()) {
    loaded.insert(g.Find("name")->string_value());
    for (const Json& r : g.Find("rules")->items()) {
      const std::string health = r.Find("health")->string_value();
      const std::string state = r.Find("state")->string_value();
      if (health == "ok" && state != "firing") {
        ++ok;
      } else {
        *why += r.Find("name")->string_value() + ": " + health + ", " + state + "\n";
      }
    }
  }
  if (loaded != names) *why += "groups loaded: " + std::to_string(loaded.size()) + "\n";
  return loaded == names && ok == rules;
}

// The dashboard's variables find job `id` and its two ranks, and every panel's query (with the
// variables substituted as Grafana does) has data.
void ExpectDashboardHasData(PrometheusServer& prometheus, const Json& dashboard,
                            const std::string& id) {
  std::vector<std::string> ranks;
  for (const Json& v : dashboard.Find("templating")->Find("list")->items()) {
    if (v.Find("type")->string_value() != "query") continue;
    const std::vector<std::string> values =
        LabelValues(prometheus, v.Find("query")->Find("query")->string_value(), id);
    if (v.Find("name")->string_value() == "rank") ranks = values;
    if (v.Find("name")->string_value() == "job") {
      EXPECT_NE(std::find(values.begin(), values.end(), id), values.end()) << Lines(values);
    }
  }
  EXPECT_EQ(std::set<std::string>(ranks.begin(), ranks.end()), (std::set<std::string>{"0", "1"}));
  std::vector<std::string> exprs, queries;
  CollectExprs(*dashboard.Find("panels"), &exprs);
  EXPECT_GT(exprs.size(), 20u);
  for (const std::string& e : exprs) {
    for (const std::string& q : Expand(e, id, ranks)) queries.push_back(q);
  }
  for (const std::string& q : queries) EXPECT_EQ(q.find('$'), std::string::npos) << q;
  std::vector<std::string> empty;
  EXPECT_TRUE(WaitUntil([&] { return (empty = Empty(prometheus, queries)).empty(); }, 15s))
      << "dashboard queries without data:\n"
      << Lines(empty);
}

// Every alert expression of `rules` (alerts.yml) evaluates (most have no result: nothing is
// wrong), and Prometheus has every group loaded and healthy with no alert firing.
void ExpectRulesEvaluate(PrometheusServer& prometheus, const Json& rules) {
  std::set<std::string> groups;
  size_t count = 0;
  std::vector<std::string> series;  // count(NAME) for each metric an alert reads
  for (const Json& g : rules.Find("groups")->items()) {
    groups.insert(g.Find("name")->string_value());
    for (const Json& r : g.Find("rules")->items()) {
      ++count;
      const std::string expr = r.Find("expr")->string_value();
      StatusOr<Json> result = prometheus.Query(expr);
      EXPECT_TRUE(result.ok()) << r.Find("alert")->string_value() << ": "
                               << result.status().message();
      for (const std::string& name : MetricNames(expr)) series.push_back("count(" + name + ")");
    }
  }
  EXPECT_EQ(count, 6u);
  // An alert on a metric nobody exports would evaluate, to nothing, for ever.
  EXPECT_GE(series.size(), 6u);
  const std::vector<std::string> missing = Empty(prometheus, series);
  EXPECT_TRUE(missing.empty()) << "alerts read metrics Prometheus has no series of:\n"
                               << Lines(missing);
  std::string why;
  EXPECT_TRUE(WaitUntil([&] { return RulesHealthy(prometheus, groups, count, &why); }, 10s)) << why;
}

TEST(MonitoringTest, PrometheusAnswersEveryDashboardQueryAndAlertRuleDuringARealJob) {
  ASSERT_EQ(::access(testing::kPrometheusBinary, X_OK), 0)
      << testing::kPrometheusBinary << " is missing: install Debian's prometheus package "
      << "(scripts/test.sh does, through scripts/deps.sh; or apt-get install prometheus)";
  StatusOr<Json> dashboard = ReadJsonFile(kMonitoring + "/grafana/trainyard-dashboard.json");
  ASSERT_TRUE(dashboard.ok()) << dashboard.status().message();
  StatusOr<Json> rules =
      client::ParseYaml(testing::ReadFile(kMonitoring + "/alerts.yml"), "alerts.yml");
  ASSERT_TRUE(rules.ok()) << rules.status().message();

  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto workers = cluster.client().ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status().message();
  std::vector<std::string> worker_metrics;
  for (const auto& w : *workers) worker_metrics.push_back(w.metrics_address());
  StatusOr<std::string> config = ScrapeConfig(cluster.metrics_address(), worker_metrics);
  ASSERT_TRUE(config.ok()) << config.status().message();
  PrometheusServer prometheus;
  ASSERT_TRUE(prometheus.Start(dir.path(), *config, &error)) << error;
  ASSERT_TRUE(WaitUntil([&] { return Empty(prometheus, {"count(up == 1) == 3"}).empty(); }, 10s))
      << "the coordinator and both workers are not all scraped:\n"
      << prometheus.log();

  // A job far longer than the test: the checks run while it trains, then it is cancelled.
  const std::string spec =
      R"({"name":"monitoring","model":{"mlp":{"sizes":[784,64,10]}},"data":{"fashion_mnist":{"limit":6400}},)"
      R"("optimizer":{"sgd":{"lr":0.05}},"batch_size":32,"steps":1000000,"parallelism":{"world_size":2}})";
  auto job = cluster.client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status().message();
  const std::string id = job->id();
  JobWatch watch(cluster.client(), id);
  ASSERT_TRUE(watch.WaitForState(v1::RUNNING, 60s)) << watch.Describe() << cluster.Logs();

  // While it runs: Prometheus sees it RUNNING, with both ranks stepping.
  const std::string of_job = "{job=\"" + id + "\"";
  std::vector<std::string> missing;
  const std::vector<std::string> running = {
      "trainyard_job_state" + of_job + ", state=\"RUNNING\"} == 1",
      "count(trainyard_rank_step" + of_job + "} > 20) == 2"};
  ASSERT_TRUE(WaitUntil([&] { return (missing = Empty(prometheus, running)).empty(); }, 30s))
      << Lines(missing) << cluster.Logs();
  ExpectDashboardHasData(prometheus, *dashboard, id);
  ExpectRulesEvaluate(prometheus, *rules);

  // Cancelled: CANCELLED as its one state now, RUNNING in the last minutes, and no alert fires.
  ASSERT_TRUE(cluster.client().Cancel(id, /*checkpoint=*/false).ok());
  ASSERT_TRUE(watch.WaitForState(v1::CANCELLED, 60s)) << watch.Describe() << cluster.Logs();
  const std::vector<std::string> seen = {
      "trainyard_job_state" + of_job + ", state=\"CANCELLED\"} == 1",
      "sum(trainyard_job_state" + of_job + "}) == 1",
      "max_over_time(trainyard_job_state" + of_job + ", state=\"RUNNING\"}[5m]) == 1"};
  EXPECT_TRUE(WaitUntil([&] { return (missing = Empty(prometheus, seen)).empty(); }, 10s))
      << Lines(missing);
  ExpectRulesEvaluate(prometheus, *rules);
  prometheus.Stop();
}

}  // namespace
}  // namespace trainyard
