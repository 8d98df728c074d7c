// ServiceClient::Watch against a real gRPC server on loopback whose WatchJob sends the job's
// state and then nothing, as the coordinator does for a pending job, or answers UNAVAILABLE, as
// a coordinator shutting down does: a WatchStop ends the watch at once, whether it is waiting
// for an event or to reconnect.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <thread>

#include "client/service_client.h"
#include "tests/testing/cluster.h"

namespace trainyard::client {
namespace {

using namespace std::chrono_literals;

// WatchJob: one state event, then silence until the client cancels (bounded: 30 s). Or, once
// `unavailable` is set, UNAVAILABLE at once, counting the calls.
class SilentCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    if (unavailable) {
      ++unavailable_calls;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
    }
    v1::JobEvent e;
    e.set_seq(1);
    e.mutable_state()->set_to(v1::PENDING);
    writer->Write(e);
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (!ctx->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(5ms);  // polls the cancellation; gRPC has no sync wait for it
    }
    return grpc::Status::OK;
  }
  std::atomic<bool> unavailable{false};
  std::atomic<int> unavailable_calls{0};
};

class WatchStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now() + 5s); }

  std::unique_ptr<ServiceClient> Connect(int port) {
    ConnectOptions o;
    o.coordinator = "127.0.0.1:" + std::to_string(port);
    o.watch_retry = 60s;  // longer than any wait below: only a stop ends the wait to reconnect
    auto c = ServiceClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  SilentCoordinator service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(WatchStopTest, StopEndsAWatchThatWaitsForEvents) {
  std::unique_ptr<ServiceClient> client = Connect(port_);
  ASSERT_NE(client, nullptr);
  WatchStop stop;
  std::promise<void> first_event;
  std::future<void> got_first = first_event.get_future();
  std::future<Status> watch = std::async(std::launch::async, [&] {
    bool first = true;
    return client->Watch(
        "j1",
        [&](const v1::JobEvent&) {
          if (first) first_event.set_value();
          first = false;
          return true;
        },
        60s, &stop);
  });
  ASSERT_EQ(got_first.wait_for(10s), std::future_status::ready);
  stop.Stop();
  ASSERT_EQ(watch.wait_for(10s), std::future_status::ready) << "the watch did not stop";
  EXPECT_EQ(watch.get().code(), StatusCode::kCancelled);
}

TEST_F(WatchStopTest, AStoppedStopEndsTheWatchBeforeItCalls) {
  std::unique_ptr<ServiceClient> client = Connect(port_);
  ASSERT_NE(client, nullptr);
  WatchStop stop;
  stop.Stop();
  int events = 0;
  const Status s = client->Watch(
      "j1", [&](const v1::JobEvent&) { return ++events > 0; }, 60s, &stop);
  EXPECT_EQ(s.code(), StatusCode::kCancelled);
  EXPECT_EQ(events, 0);
  stop.Stop();  // again: it holds nothing of the watch that ended
}

TEST_F(WatchStopTest, StopEndsAWatchWaitingToReconnect) {
  service_.unavailable = true;
  std::unique_ptr<ServiceClient> client = Connect(port_);
  ASSERT_NE(client, nullptr);
  WatchStop stop;
  std::future<Status> watch = std::async(std::launch::async, [&] {
    return client->Watch(
        "j1", [](const v1::JobEvent&) { return true; }, 120s, &stop);
  });
  // Its first call was answered UNAVAILABLE: the watch now waits a minute to reconnect.
  ASSERT_TRUE(testing::WaitUntil([&] { return service_.unavailable_calls > 0; }, 10s));
  stop.Stop();
  ASSERT_EQ(watch.wait_for(10s), std::future_status::ready) << "the watch did not stop";
  EXPECT_EQ(watch.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(service_.unavailable_calls, 1);
}

}  // namespace
}  // namespace trainyard::client
