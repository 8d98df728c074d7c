// What the Coordinator class tests share.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/job_store.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

// The commands but the heartbeat acknowledgements (coordinator_fencing_test.cc tests those).
inline std::vector<trainyard::v1::WorkerCommand> WithoutAcks(
    std::vector<trainyard::v1::WorkerCommand> in) {
  std::vector<trainyard::v1::WorkerCommand> out;
  for (auto& c : in) {
    if (!c.has_ack()) out.push_back(std::move(c));
  }
  return out;
}

// A Coordinator on an in-memory job store and a fake clock, and workers of one CPU slot.
class CoordinatorFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(NewMemoryJobStore(), &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
  }
  Coordinator& c() { return *coordinator_; }

  // Registers worker `name` (host "<name>.host") and returns its incarnation (0 on failure).
  int64_t Register(const std::string& name) {
    trainyard::v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_host(name + ".host");
    req.set_cpu_slots(1);
    EXPECT_TRUE(c().RegisterWorker(req).ok());
    StatusOr<int64_t> incarnation = c().Incarnation(name);
    return incarnation.ok() ? *incarnation : 0;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
};

}  // namespace trainyard::server
