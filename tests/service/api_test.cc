// The API as an outside client meets it, against the real coordinator: a typed JobSpec submit,
// errors that arrive whole and bounded (with google.rpc.BadRequest details), argument checks,
// WatchJob resuming from a stored event, per-service health and reflection v1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "proto/rpc.h"
#include "tests/testing/cluster.h"
#include "tests/testing/generic_call.h"
#include "tests/testing/temp_dir.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using ::testing::HasSubstr;
using testing::TempDir;

std::unique_ptr<v1::Coordinator::Stub> Stub(const Cluster& cluster) {
  return v1::Coordinator::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
}

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + 20s);
}

// A spec with `n` unknown top-level fields x0 .. x(n-1).
std::string WithUnknownFields(int n) {
  std::string spec = R"({"model":{"mlp":{"sizes":[784,10]}},"data":{"fashion_mnist":{}},)"
                     R"("optimizer":{"sgd":{}})";
  for (int i = 0; i < n; ++i) spec += ",\"x" + std::to_string(i) + "\":1";
  return spec + "}";
}

// 80 problems and 30 000: each an INVALID_ARGUMENT whose message stays under 4 KiB and ends with
// how many were left out, and whose BadRequest details name the fields, bounded too.
TEST(ApiTest, ErrorsArriveWholeAndBoundedWithFieldViolations) {
  TempDir dir;
  Cluster cluster(dir.path(), {0, 1, 10, {}, {}, {}});
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  for (int n : {80, 30000}) {
    auto job = cluster.client().Submit(WithUnknownFields(n));
    ASSERT_FALSE(job.ok());
    const Status& s = job.status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_LT(s.message().size(), 4096u) << n;
    EXPECT_THAT(s.message(), HasSubstr("(" + std::to_string(n) + " problems)"));
    EXPECT_THAT(s.message(), HasSubstr("unknown field x0"));
    EXPECT_THAT(s.message(), ::testing::ContainsRegex("and [0-9]+ more"));
    const std::vector<FieldViolation>& v = s.field_violations();
    ASSERT_GT(v.size(), 2u) << n;
    EXPECT_EQ(v[0].field, "x0");
    EXPECT_THAT(v[0].description, HasSubstr("unknown field"));
    int listed = static_cast<int>(v.size()), left_out = 0;
    if (v.back().field.empty()) {
      EXPECT_THAT(v.back().description, ::testing::MatchesRegex("and [0-9]+ more"));
      left_out = std::atoi(v.back().description.c_str() + 4);
      --listed;
    }
    EXPECT_EQ(listed + left_out, n) << "every problem counted";
    if (n == 30000) {
      EXPECT_GT(left_out, 0) << "the details are bounded too";
    }
  }
  EXPECT_TRUE(cluster.coordinator().running());
}

TEST(ApiTest, ArgumentsAreCheckedAndNamed) {
  TempDir dir;
  Cluster cluster(dir.path(), {0, 1, 10, {}, {}, {}});
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  auto stub = Stub(cluster);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetJobResponse resp;
    grpc::Status s = stub->GetJob(&ctx, {}, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("id"));
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ListJobsRequest req;
    req.add_states(static_cast<v1::JobState>(42));
    v1::ListJobsResponse resp;
    grpc::Status s = stub->ListJobs(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("42"));
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::WatchJobRequest req;
    req.set_id("nope-1");
    req.set_from_seq(-1);
    auto reader = stub->WatchJob(&ctx, req);
    v1::JobEvent e;
    while (reader->Read(&e)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

// A typed JobSpec (SubmitJobRequest.spec) is the same job as its JSON; WatchJob from_seq 1
// replays the stored events, the first one included, and the CLI's reconnect relies on it.
TEST(ApiTest, TypedSpecSubmitAndWatchFromAStoredEvent) {
  TempDir dir;
  Cluster cluster(dir.path(), {1, 1, 10, {}, {}, {}});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto stub = Stub(cluster);
  v1::SubmitJobRequest req;
  v1::JobSpec& spec = *req.mutable_spec();
  spec.set_name("typed");
  for (int64_t size : {784, 16, 10}) spec.mutable_model()->mutable_mlp()->add_sizes(size);
  spec.mutable_data()->mutable_fashion_mnist()->set_limit(320);
  spec.mutable_optimizer()->mutable_sgd()->set_lr(0.05);
  spec.set_steps(5);
  v1::SubmitJobResponse submitted;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status s = stub->SubmitJob(&ctx, req, &submitted);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(submitted.job().name(), "typed");
  EXPECT_THAT(submitted.job().spec_json(), HasSubstr("\"lr\":0.05"));
  EXPECT_EQ(submitted.job().uid().size(), 32u);
  testing::JobWatch watch(cluster.client(), submitted.job().id());
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 60s)) << watch.Describe() << cluster.Logs();

  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::WatchJobRequest from;
  from.set_id(submitted.job().id());
  from.set_from_seq(1);
  auto reader = stub->WatchJob(&ctx, from);
  std::vector<v1::JobEvent> events;
  for (v1::JobEvent e; reader->Read(&e);) events.push_back(e);
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0].seq(), 1);
  EXPECT_EQ(events[0].state().to(), v1::PENDING);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i].seq(), events[i - 1].seq() + 1);
  EXPECT_EQ(events.back().state().to(), v1::SUCCEEDED);

  // A spec that validates but whose ranks cannot fit any worker's memory (1.1e12 parameters with
  // AdamW: about 16 TiB a rank) is refused at submit, not OOM-killed later.
  auto huge = cluster.client().Submit(
      R"({"name":"huge","model":{"mlp":{"sizes":[784,1048576,1048576,10]}},"data":{"fashion_mnist":{}},)"
      R"("optimizer":{"adamw":{}},"steps":5})");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(huge.status().message(), HasSubstr("the job needs about"));
  EXPECT_THAT(huge.status().message(), HasSubstr("optimizer state"));
  EXPECT_THAT(huge.status().message(), HasSubstr("the most any worker has is"));

  // A typed spec with an unknown field (a newer client's) is refused by name.
  v1::SubmitJobRequest newer = req;
  newer.mutable_spec()
      ->GetReflection()
      ->MutableUnknownFields(newer.mutable_spec())
      ->AddVarint(99, 1);
  grpc::ClientContext ctx2;
  Deadline(&ctx2);
  grpc::Status s = stub->SubmitJob(&ctx2, newer, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("#99")) << s.error_message();
}

// A coordinator with a fresh --state-dir numbers jobs from 1 again: its fashion-mlp-1 has the old
// fashion-mlp-1's checkpoint directory, and must not resume the old job's last step (Note [Run
// identity]: checkpoints carry the job's uid). It fails at once, naming the checkpoint.
TEST(ApiTest, ANewJobNeverResumesAnOldJobsCheckpointOfTheSameName) {
  TempDir dir;
  const std::string spec =
      R"({"name":"fashion-mlp","model":{"mlp":{"sizes":[784,16,10]}},"data":{"fashion_mnist":{"limit":320}},)"
      R"("optimizer":{"sgd":{}},"steps":4,"checkpoint":{"dir":")" +
      dir.File("ckpt") + R"("}})";
  std::string first_id;
  {
    Cluster old(dir.File("old"), {1, 1, 10, {}, {}, {}});
    std::filesystem::create_directories(dir.File("old"));
    std::string error;
    ASSERT_TRUE(old.Start(&error)) << error;
    auto job = old.client().Submit(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    first_id = job->id();
    testing::JobWatch watch(old.client(), job->id());
    ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 60s)) << watch.Describe() << old.Logs();
  }
  Cluster fresh(dir.File("fresh"), {1, 1, 10, {}, {}, {}});
  std::filesystem::create_directories(dir.File("fresh"));
  std::string error;
  ASSERT_TRUE(fresh.Start(&error)) << error;
  auto job = fresh.client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->id(), first_id);
  testing::JobWatch watch(fresh.client(), job->id());
  ASSERT_TRUE(watch.WaitForState(v1::FAILED, 60s)) << watch.Describe() << fresh.Logs();
  auto failed = fresh.client().GetJob(job->id());
  ASSERT_TRUE(failed.ok());
  EXPECT_THAT(failed->reason(), HasSubstr("holds a checkpoint of another run"));
  EXPECT_THAT(failed->reason(), HasSubstr("its uid is not this run's (" + failed->uid() + ")"));
  EXPECT_EQ(failed->restarts(), 0);
}

// Health answers per service (what Kubernetes' gRPC probes and grpc_health_probe ask), and
// reflection v1 lists the services, beside v1alpha (tests/service/service_test.cc).
TEST(ApiTest, HealthPerServiceAndReflectionV1) {
  TempDir dir;
  Cluster cluster(dir.path(), {0, 1, 10, {}, {}, {}});
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  auto channel = grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials());
  for (const std::string service : {"trainyard.v1.Coordinator", "trainyard.v1.Worker"}) {
    // HealthCheckRequest{service} is field 1; SERVING is 08 01.
    std::string response;
    grpc::Status s = testing::GenericUnary(
        channel, "/grpc.health.v1.Health/Check",
        std::string("\x0a", 1) + static_cast<char>(service.size()) + service, &response);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(response, std::string("\x08\x01", 2)) << service;
  }
  std::string response;
  EXPECT_EQ(testing::GenericUnary(channel, "/grpc.health.v1.Health/Check",
                                  std::string("\x0a\x03"
                                              "foo",
                                              5),
                                  &response)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);

  const std::string v1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
  // list_services (field 7).
  const std::string services = testing::ReflectionExchange(channel, v1, std::string("\x3a\x00", 2));
  EXPECT_THAT(services, HasSubstr("trainyard.v1.Coordinator"));
  EXPECT_THAT(services, HasSubstr("grpc.reflection.v1.ServerReflection"));
  // file_containing_symbol (field 4): the job spec's schema is there to describe.
  const std::string symbol = "trainyard.v1.JobSpec";
  const std::string file = testing::ReflectionExchange(
      channel, v1, std::string("\x22", 1) + static_cast<char>(symbol.size()) + symbol);
  EXPECT_THAT(file, HasSubstr("trainyard/v1/job.proto"));
  EXPECT_THAT(file, HasSubstr("JobSpec"));
}

}  // namespace
}  // namespace trainyard
