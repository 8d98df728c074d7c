#include "server/worker_registry.h"

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace std::chrono_literals;

trainyard::v1::WorkerInfo Info(const std::string& name, int cpu_slots = 2) {
  trainyard::v1::WorkerInfo info;
  info.set_name(name);
  info.set_host(name + ".host");
  info.set_cpu_slots(cpu_slots);
  return info;
}

std::vector<std::string> AliveNames(const WorkerRegistry& r) {
  std::vector<std::string> out;
  for (const WorkerRegistry::Entry* e : r.Alive()) out.push_back(e->info.name());
  return out;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  WorkerRegistry registry_{&clock_, 10s};
};

TEST_F(WorkerRegistryTest, WorkerIsAliveUntilNoHeartbeatCameForTheTimeout) {
  registry_.Register(Info("a"));
  EXPECT_TRUE(registry_.IsAlive("a"));
  EXPECT_TRUE(registry_.Find("a")->info.alive());

  clock_.Advance(10s - 1ms);
  EXPECT_THAT(registry_.Expire(), IsEmpty());
  EXPECT_TRUE(registry_.IsAlive("a"));

  clock_.Advance(1ms);
  EXPECT_THAT(registry_.Expire(), ElementsAre("a"));
  EXPECT_FALSE(registry_.IsAlive("a"));
  EXPECT_FALSE(registry_.Find("a")->info.alive());
  EXPECT_THAT(AliveNames(registry_), IsEmpty());
}

TEST_F(WorkerRegistryTest, HeartbeatRestartsTheTimeout) {
  registry_.Register(Info("a"));
  registry_.Register(Info("b"));
  clock_.Advance(6s);
  EXPECT_TRUE(registry_.Heartbeat("a"));
  clock_.Advance(6s);
  EXPECT_THAT(registry_.Expire(), ElementsAre("b"));
  EXPECT_THAT(AliveNames(registry_), ElementsAre("a"));
}

TEST_F(WorkerRegistryTest, ExpireReportsADeadWorkerOnce) {
  registry_.Register(Info("a"));
  clock_.Advance(11s);
  EXPECT_THAT(registry_.Expire(), ElementsAre("a"));
  clock_.Advance(11s);
  EXPECT_THAT(registry_.Expire(), IsEmpty());
}

TEST_F(WorkerRegistryTest, HeartbeatOfADeadOrUnknownWorkerAsksItToRegister) {
  EXPECT_FALSE(registry_.Heartbeat("nobody"));
  registry_.Register(Info("a"));
  clock_.Advance(10s);
  registry_.Expire();
  EXPECT_FALSE(registry_.Heartbeat("a"));
  EXPECT_FALSE(registry_.IsAlive("a"));
}

TEST_F(WorkerRegistryTest, RegisteringAgainBumpsTheIncarnationAndRevivesTheWorker) {
  const int64_t first = registry_.Register(Info("a", 2));
  const int64_t other = registry_.Register(Info("b"));
  EXPECT_NE(first, other);
  EXPECT_EQ(registry_.Find("a")->incarnation, first);

  clock_.Advance(10s);
  EXPECT_THAT(registry_.Expire(), ElementsAre("a", "b"));

  const int64_t second = registry_.Register(Info("a", 8));
  EXPECT_GT(second, first);
  EXPECT_GT(second, other);
  EXPECT_EQ(registry_.Find("a")->incarnation, second);
  EXPECT_EQ(registry_.Find("a")->info.cpu_slots(), 8);  // the new registration replaces the old
  EXPECT_TRUE(registry_.IsAlive("a"));
  EXPECT_EQ(registry_.all().size(), 2u);
  // Alive from the new registration: the old heartbeat time no longer counts.
  clock_.Advance(9s);
  EXPECT_THAT(registry_.Expire(), IsEmpty());
}

TEST_F(WorkerRegistryTest, AliveListsWorkersByName) {
  registry_.Register(Info("c"));
  registry_.Register(Info("a"));
  registry_.Register(Info("b"));
  EXPECT_THAT(AliveNames(registry_), ElementsAre("a", "b", "c"));
  EXPECT_EQ(registry_.Find("missing"), nullptr);
  EXPECT_FALSE(registry_.IsAlive("missing"));
}

}  // namespace
}  // namespace trainyard::server
