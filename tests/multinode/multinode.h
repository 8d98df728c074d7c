// What the multinode tests share: their specs, a cluster of namespaced nodes, and checks on a
// job's loss curve across attempts.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/testing/cluster.h"

namespace trainyard::testing {

inline const std::string kSource = TY_SOURCE_DIR;

// Fashion-MNIST through the example's MLP on `world` ranks, checkpointing every `every` steps
// (0: never); `extra` is appended inside the spec's object.
inline std::string MlpSpec(const std::string& name, int world, int steps, int every,
                           const std::string& extra = "") {
  return R"({"name":")" + name +
         R"(","model":{"mlp":{"sizes":[784,512,256,10]}},)"
         R"("data":{"fashion_mnist":{"limit":12800},"num_workers":0},)"
         R"("optimizer":{"adamw":{"lr":0.001,"weight_decay":0.01}},"batch_size":32,"seed":1,)"
         R"("steps":)" +
         std::to_string(steps) + R"(,"checkpoint":{"every_steps":)" + std::to_string(every) +
         R"(},"parallelism":{"world_size":)" + std::to_string(world) +
         R"(,"collective_timeout_seconds":15})" + extra + "}";
}

// A namespaced cluster of `workers` nodes plus the coordinator's, started; fails the test
// (with every log) when it does not come up.
inline std::unique_ptr<Cluster> StartNamespaced(const std::string& dir, int workers,
                                                std::vector<std::string> worker_flags = {},
                                                double heartbeat_timeout = 10) {
  ClusterOptions o;
  o.workers = workers;
  o.namespaced = true;
  o.heartbeat_timeout = heartbeat_timeout;
  o.worker_flags = std::move(worker_flags);
  auto cluster = std::make_unique<Cluster>(dir, o);
  std::string error;
  EXPECT_TRUE(cluster->Start(&error)) << error;
  if (!error.empty()) return nullptr;
  return cluster;
}

// Each step's loss (the last report of a step wins: a step repeated by a later attempt).
inline std::map<int64_t, double> LossByStep(const std::vector<v1::JobEvent>& events) {
  std::map<int64_t, double> out;
  for (const auto& e : events) {
    if (e.has_step()) out[e.step().step()] = e.step().loss();
  }
  return out;
}

// The first step reported after attempt `n` was scheduled (-1: none).
inline int64_t FirstStepOfAttempt(const std::vector<v1::JobEvent>& events, int n) {
  bool in = false;
  for (const auto& e : events) {
    if (e.has_state() && e.state().to() == v1::SCHEDULED) in = e.state().attempt() == n;
    if (in && e.has_step()) return e.step().step();
  }
  return -1;
}

// The losses reported by attempt `n` (in order), and those reported before it started.
inline void LossesAround(const std::vector<v1::JobEvent>& events, int n,
                         std::vector<double>* before, std::vector<double>* after) {
  bool in = false;
  for (const auto& e : events) {
    if (e.has_state() && e.state().to() == v1::SCHEDULED) in = e.state().attempt() == n;
    if (e.has_step()) (in ? after : before)->push_back(e.step().loss());
  }
}

// The loss curve is continuous across attempt `n`'s start: the mean loss of its first 10
// steps is within a factor of 1.6 of the mean of the last 10 before it (single batches vary
// too much to compare), and under half the first step's loss, to which a restart from scratch
// would jump back.
inline void ExpectContinuousLoss(const std::vector<v1::JobEvent>& events, int n) {
  std::vector<double> before, after;
  LossesAround(events, n, &before, &after);
  ASSERT_GE(before.size(), 10u) << "too few steps before attempt " << n;
  ASSERT_GE(after.size(), 10u) << "too few steps in attempt " << n;
  auto mean = [](auto first, auto last) {
    double sum = 0;
    for (auto it = first; it != last; ++it) sum += *it;
    return sum / static_cast<double>(last - first);
  };
  const double was = mean(before.end() - 10, before.end());
  const double resumed = mean(after.begin(), after.begin() + 10);
  EXPECT_LT(resumed, 1.6 * was) << "attempt " << n << " resumed at a higher loss";
  EXPECT_LT(resumed, 0.5 * before.front()) << "attempt " << n << " started over";
}

}  // namespace trainyard::testing
