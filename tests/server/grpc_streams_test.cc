// The callback streams (grpc_streams.h) through a real gRPC server on loopback: a heartbeat
// stream forwards the queued commands in order as they come, a registration again ends the
// older stream, and stopping the services ends every stream at once.
#include "server/grpc_streams.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <memory>

#include "gtest/gtest.h"
#include "server/grpc_services.h"

namespace trainyard::server {
namespace {

using namespace std::chrono_literals;
namespace v1 = ::trainyard::v1;

constexpr char kSpec[] =
    R"({"name":"t","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"x.csv"}},)"
    R"("optimizer":{"sgd":{}},"steps":10})";

class GrpcStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Coordinator::Create(NewMemoryJobStore(), &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
    auto auth = Authenticator::Create("", false);
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = *std::move(auth);
    client_service_ = std::make_unique<CoordinatorService>(coordinator_.get(), auth_.get());
    worker_service_ = std::make_unique<WorkerService>(coordinator_.get(), auth_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(client_service_.get());
    builder.RegisterService(worker_service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    workers_ = v1::Worker::NewStub(channel);
    clients_ = v1::Coordinator::NewStub(channel);
  }
  void TearDown() override {
    client_service_->Stop();
    worker_service_->Stop();
    server_->Shutdown(std::chrono::system_clock::now() + 5s);
  }

  void Register(const std::string& name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_cpu_slots(1);
    v1::RegisterWorkerResponse resp;
    ASSERT_TRUE(workers_->RegisterWorker(&ctx, req, &resp).ok());
  }

  // Reads the next command but heartbeat acknowledgements within 10 s (the context's deadline
  // bounds every read).
  static bool Read(grpc::ClientReaderWriter<v1::WorkerHeartbeat, v1::WorkerCommand>* stream,
                   v1::WorkerCommand* c) {
    while (stream->Read(c)) {
      if (!c->has_ack()) return true;
    }
    return false;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<CoordinatorService> client_service_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> workers_;
  std::unique_ptr<v1::Coordinator::Stub> clients_;
};

TEST_F(GrpcStreamsTest, AHeartbeatStreamForwardsTheQueuedCommandsInOrder) {
  Register("a");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = workers_->Heartbeat(&ctx);
  v1::WorkerHeartbeat hb;
  hb.set_name("a");
  ASSERT_TRUE(stream->Write(hb));
  // The job is placed on a (an assignment), then cancelled (a stop of its rank).
  auto job = coordinator_->Submit(kSpec);
  ASSERT_TRUE(job.ok()) << job.status();
  coordinator_->Tick();
  ASSERT_TRUE(coordinator_->Cancel(job->id(), false).ok());
  v1::WorkerCommand first, second;
  ASSERT_TRUE(Read(stream.get(), &first));
  ASSERT_TRUE(Read(stream.get(), &second));
  EXPECT_TRUE(first.has_assign()) << first.DebugString();
  EXPECT_FALSE(second.has_assign()) << second.DebugString();
  // Registering again ends this stream: a newer one serves the worker now.
  Register("a");
  v1::WorkerCommand none;
  EXPECT_FALSE(Read(stream.get(), &none));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::ABORTED);
}

TEST_F(GrpcStreamsTest, StoppingTheServicesEndsEveryStreamAtOnce) {
  Register("a");
  auto job = coordinator_->Submit(kSpec);
  ASSERT_TRUE(job.ok()) << job.status();
  grpc::ClientContext hb_ctx, watch_ctx;
  hb_ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  watch_ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto heartbeats = workers_->Heartbeat(&hb_ctx);
  v1::WorkerHeartbeat hb;
  hb.set_name("a");
  ASSERT_TRUE(heartbeats->Write(hb));
  v1::WatchJobRequest req;
  req.set_id(job->id());
  auto watch = clients_->WatchJob(&watch_ctx, req);
  v1::JobEvent event;
  ASSERT_TRUE(watch->Read(&event));  // the current state: the stream is live
  const auto t0 = std::chrono::steady_clock::now();
  client_service_->Stop();
  worker_service_->Stop();
  while (watch->Read(&event)) {
  }
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  v1::WorkerCommand c;
  while (heartbeats->Read(&c)) {
  }
  EXPECT_TRUE(heartbeats->Finish().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // not the 30 s deadlines
}

}  // namespace
}  // namespace trainyard::server
