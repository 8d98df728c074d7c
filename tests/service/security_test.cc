// Security with the real coordinator over real TLS channels: bearer tokens with names and
// roles, mutual TLS for workers with the worker name bound to the certificate, the tokens file
// reloaded on SIGHUP. The certificates are made by openssl for each test (MakeCertificates).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/testing/cluster.h"
#include "tests/testing/generic_call.h"
#include "tests/testing/pki.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::ClusterOptions;
using testing::TempDir;

// Makes ca.pem and, each with its .key, CA-signed certificates: server.pem (for 127.0.0.1 and
// localhost); w0.pem (CN=w0) and w1.pem (CN=node-1, SAN DNS:w1), the workers' own; and
// mallory.pem (CN=mallory), valid but another name's.
void MakeCertificates(const std::string& dir) {
  ASSERT_TRUE(testing::MakeTestPki(dir, {{"server", "server", "IP:127.0.0.1,DNS:localhost"},
                                         {"w0", "w0", "DNS:localhost"},
                                         {"w1", "node-1", "DNS:w1"},
                                         {"mallory", "mallory", "DNS:mallory"}}))
      << "openssl failed";
}

ClusterOptions Secure(const std::string& dir, bool worker_certs) {
  ClusterOptions o;
  o.coordinator_flags = {"--tls-cert",        dir + "/server.pem", "--tls-key",
                         dir + "/server.key", "--tls-client-ca",   dir + "/ca.pem",
                         "--tokens-file",     dir + "/tokens"};
  o.worker_flags = {"--ca-cert", dir + "/ca.pem"};
  if (worker_certs) {
    o.worker_flags.insert(o.worker_flags.end(),
                          {"--cert", dir + "/{name}.pem", "--key", dir + "/{name}.key"});
  }
  o.connect.channel.tls.ca = dir + "/ca.pem";
  o.connect.token = "s3cret-token";
  return o;
}

// grpc.health.v1.Health/Check{service: ""} (an empty message) over `channel`, as the kubelet's
// gRPC probe calls it; the response's bytes go to `response` (SERVING is 08 01).
grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel, std::string* response) {
  return testing::GenericUnary(channel, "/grpc.health.v1.Health/Check", "", response);
}

// --health-listen: probes that speak neither TLS nor tokens (the kubelet's) get an answer on
// a plaintext port of their own, which serves nothing of the API.
TEST(SecurityTest, HealthListenerAnswersPlaintextProbesAndServesNothingElse) {
  TempDir dir;
  MakeCertificates(dir.path());
  { std::ofstream(dir.File("tokens")) << "s3cret-token alice\n"; }
  ClusterOptions o = Secure(dir.path(), true);
  o.workers = 0;
  o.coordinator_flags.insert(o.coordinator_flags.end(), {"--health-listen", "127.0.0.1:0"});
  Cluster cluster(dir.path(), o);
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  std::istringstream ready(testing::ReadFile(dir.File("coordinator.ready")));
  std::string address, metrics, health;
  ready >> address >> metrics >> health;
  ASSERT_NE(health.find("127.0.0.1:"), std::string::npos) << ready.str();
  EXPECT_NE(cluster.coordinator().log().find("health (plaintext) on " + health), std::string::npos);

  auto plain = grpc::CreateChannel(health, grpc::InsecureChannelCredentials());
  std::string response;
  grpc::Status s = HealthCheck(plain, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response, std::string("\x08\x01", 2));
  // Not the API: even with the token, the Coordinator service is not there.
  grpc::ClientContext ctx;
  rpc::AddToken(&ctx, "s3cret-token");
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  v1::ListJobsResponse listed;
  EXPECT_EQ(v1::Coordinator::NewStub(plain)->ListJobs(&ctx, {}, &listed).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // Why it exists: the same probe in plaintext on the TLS port gets nothing.
  response.clear();
  auto tls_port = grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials());
  EXPECT_FALSE(HealthCheck(tls_port, &response).ok());
}

TEST(SecurityTest, ClientCallsWithoutAValidTokenAreUnauthenticated) {
  TempDir dir;
  MakeCertificates(dir.path());
  { std::ofstream(dir.File("tokens")) << "# TOKEN NAME [ROLE]\ns3cret-token alice\n"; }
  Cluster cluster(dir.path(), Secure(dir.path(), true));
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  EXPECT_TRUE(cluster.client().ListJobs({}).ok());  // with the token

  for (const std::string token : {"", "wrong"}) {
    client::ConnectOptions o;
    o.coordinator = cluster.address();
    o.channel.tls.ca = dir.File("ca.pem");
    o.token = token;
    auto c = client::ServiceClient::Connect(o);
    ASSERT_TRUE(c.ok());
    auto listed = (*c)->ListJobs({});
    EXPECT_EQ(listed.status().code(), static_cast<StatusCode>(16)) << "token \"" << token << "\"";
    EXPECT_NE(listed.status().message().find("bearer token"), std::string::npos);
  }
  // The CLI reads the token from the environment too.
  ::setenv("TRAINYARD_TOKEN", "s3cret-token", 1);
  testing::ProcessResult r =
      testing::RunProcess({std::string(TY_BIN_DIR) + "/trainyard", "list", "--coordinator",
                           cluster.address(), "--ca-cert", dir.File("ca.pem")},
                          30s);
  ::unsetenv("TRAINYARD_TOKEN");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = testing::RunProcess({std::string(TY_BIN_DIR) + "/trainyard", "list", "--coordinator",
                           cluster.address(), "--ca-cert", dir.File("ca.pem")},
                          30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bearer token"), std::string::npos) << r.err;
  // Plaintext to a TLS coordinator does not get through either.
  client::ConnectOptions plain;
  plain.coordinator = cluster.address();
  plain.token = "s3cret-token";
  plain.deadline = 5s;
  auto c = client::ServiceClient::Connect(plain);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->ListJobs({}).ok());
}

TEST(SecurityTest, UnderMutualTlsWithoutTokensClientsNeedACertificate) {
  TempDir dir;
  MakeCertificates(dir.path());
  ClusterOptions o = Secure(dir.path(), true);
  o.coordinator_flags.resize(6);  // no --tokens-file
  o.workers = 0;
  o.connect.token = "";
  Cluster cluster(dir.path(), o);
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  auto listed = cluster.client().ListJobs({});
  EXPECT_EQ(listed.status().code(), static_cast<StatusCode>(16)) << listed.status().message();
  EXPECT_NE(listed.status().message().find("client certificate"), std::string::npos);
  client::ConnectOptions with;
  with.coordinator = cluster.address();
  with.channel.tls = {dir.File("ca.pem"), dir.File("w0.pem"), dir.File("w0.key")};
  auto c = client::ServiceClient::Connect(with);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->ListJobs({}).ok());
}

TEST(SecurityTest, WorkerWithoutAClientCertificateIsRefusedUnderMutualTls) {
  TempDir dir;
  MakeCertificates(dir.path());
  { std::ofstream(dir.File("tokens")) << "s3cret-token alice\n"; }
  ClusterOptions o = Secure(dir.path(), /*worker_certs=*/false);
  o.workers = 1;
  Cluster cluster(dir.path(), o);
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  cluster.StartWorker(0);  // TLS, but no client certificate (and no token)
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return cluster.worker(0).log().find("client certificate") != std::string::npos; }, 20s))
      << cluster.Logs();
  EXPECT_EQ(cluster.AliveWorkers(), 0);

  // Even with the clients' token, a worker call needs the worker role.
  rpc::ChannelOptions co;
  co.tls.ca = dir.File("ca.pem");
  auto channel = rpc::MakeChannel(cluster.address(), co);
  ASSERT_TRUE(channel.ok());
  auto stub = v1::Worker::NewStub(*channel);
  grpc::ClientContext ctx;
  rpc::AddToken(&ctx, "s3cret-token");
  v1::RegisterWorkerRequest req;
  req.set_name("intruder");
  req.set_cpu_slots(1);
  v1::RegisterWorkerResponse resp;
  grpc::Status refused = stub->RegisterWorker(&ctx, req, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(refused.error_message().find("needs the worker role"), std::string::npos)
      << refused.error_message();

  // With its certificate the same worker registers, and its ranks rendezvous over mutual TLS.
  cluster.worker(0).Kill(SIGKILL);
  ClusterOptions with = Secure(dir.path(), /*worker_certs=*/true);
  with.workers = 1;
  with.slots = 2;
  Cluster good(dir.File("good"), with);
  std::filesystem::create_directories(dir.File("good"));
  cluster.coordinator().Kill(SIGTERM);
  ASSERT_TRUE(good.Start(&error)) << error;
  EXPECT_EQ(good.AliveWorkers(), 1);
  auto job = good.client().Submit(
      R"({"name":"tls","model":{"mlp":{"sizes":[784,16,10]}},"data":{"fashion_mnist":{"limit":640}},)"
      R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":2}})");
  ASSERT_TRUE(job.ok()) << job.status().message();
  testing::JobWatch watch(good.client(), job->id());
  EXPECT_TRUE(watch.WaitForState(v1::SUCCEEDED, 60s)) << watch.Describe() << good.Logs();
}

// A Worker stub over TLS to `cluster`, with the client certificate `cert` (dir/cert.pem, "" for
// none).
std::unique_ptr<v1::Worker::Stub> WorkerStub(const Cluster& cluster, const TempDir& dir,
                                             const std::string& cert) {
  rpc::ChannelOptions co;
  co.tls.ca = dir.File("ca.pem");
  if (!cert.empty())
    co.tls = {dir.File("ca.pem"), dir.File(cert + ".pem"), dir.File(cert + ".key")};
  auto channel = rpc::MakeChannel(cluster.address(), co);
  EXPECT_TRUE(channel.ok()) << channel.status();
  return v1::Worker::NewStub(*channel);
}

grpc::Status Register(v1::Worker::Stub& stub, const std::string& name, const std::string& token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  rpc::AddToken(&ctx, token);
  v1::RegisterWorkerRequest req;
  req.set_name(name);
  req.set_cpu_slots(1);
  v1::RegisterWorkerResponse resp;
  return stub.RegisterWorker(&ctx, req, &resp);
}

// Opens a heartbeat stream, sends one heartbeat as `name` and returns how the stream ended.
grpc::Status Heartbeat(v1::Worker::Stub& stub, const std::string& name, const std::string& token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  rpc::AddToken(&ctx, token);
  auto stream = stub.Heartbeat(&ctx);
  v1::WorkerHeartbeat hb;
  hb.set_name(name);
  stream->Write(hb);
  stream->WritesDone();
  v1::WorkerCommand command;
  while (stream->Read(&command)) {
  }
  return stream->Finish();
}

bool Alive(Cluster& cluster, const std::string& name) {
  auto listed = cluster.client().ListWorkers();
  if (!listed.ok()) return false;
  for (const auto& w : *listed) {
    if (w.name() == name) return w.alive();
  }
  return false;
}

constexpr const char* kMlp =
    R"({"name":"sec","model":{"mlp":{"sizes":[784,16,10]}},"data":{"fashion_mnist":{"limit":640}},)"
    R"("optimizer":{"sgd":{}},"steps":10,"parallelism":{"world_size":2}})";

// Tokens only (the Kubernetes setup): a client token may not call the Worker service, a worker
// token may not call the Coordinator service, and a worker token acts only as the names it is
// bound to. The workers' own token (worker=w*) is the positive control: they register and
// train; events name the client that submitted and cancelled.
TEST(SecurityTest, TokenRolesAndNamesAreEnforced) {
  TempDir dir;
  MakeCertificates(dir.path());
  {
    std::ofstream(dir.File("tokens")) << "s3cret-token alice\n"
                                         "nodes-token nodes worker=w*\n"
                                         "w9-token w9 worker\n";
  }
  ClusterOptions o = Secure(dir.path(), false);
  o.coordinator_flags.erase(o.coordinator_flags.begin() + 4, o.coordinator_flags.begin() + 6);
  o.worker_flags.insert(o.worker_flags.end(), {"--token", "nodes-token"});
  o.slots = 1;
  Cluster cluster(dir.path(), o);
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;

  auto stub = WorkerStub(cluster, dir, "");
  grpc::Status s = Register(*stub, "w0", "s3cret-token");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("client token \"alice\" has the client role only"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("needs the worker role"), std::string::npos);
  EXPECT_EQ(Heartbeat(*stub, "w0", "s3cret-token").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A worker token bound to w9: not w0, w9 itself yes.
  s = Register(*stub, "w0", "w9-token");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("worker name \"w0\" is not bound to worker token \"w9\""),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(Register(*stub, "w9", "w9-token").ok());
  EXPECT_TRUE(Alive(cluster, "w0"));

  // A worker token on the Coordinator service.
  client::ConnectOptions as_worker;
  as_worker.coordinator = cluster.address();
  as_worker.channel.tls.ca = dir.File("ca.pem");
  as_worker.token = "nodes-token";
  auto c = client::ServiceClient::Connect(as_worker);
  ASSERT_TRUE(c.ok());
  Status listed = (*c)->ListJobs({}).status();
  EXPECT_EQ(listed.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(listed.message().find("needs the client role"), std::string::npos) << listed.message();

  // "Bearer" in any case (RFC 6750).
  auto channel = rpc::MakeChannel(cluster.address(), as_worker.channel);
  ASSERT_TRUE(channel.ok());
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "bEaReR s3cret-token");
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(v1::Coordinator::NewStub(*channel)->ListJobs(&ctx, {}, &jobs).ok());

  auto job = cluster.client().Submit(kMlp);
  ASSERT_TRUE(job.ok()) << job.status().message();
  testing::JobWatch watch(cluster.client(), job->id());
  EXPECT_TRUE(watch.WaitForState(v1::SUCCEEDED, 60s)) << watch.Describe() << cluster.Logs();
  EXPECT_NE(cluster.coordinator().log().find("submitted by alice"), std::string::npos);
  auto got = cluster.client().GetJob(job->id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->submitted_by(), "alice");

  auto second = cluster.client().Submit(kMlp);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(cluster.client().Cancel(second->id(), false).ok());
  testing::JobWatch cancelled(cluster.client(), second->id());
  EXPECT_TRUE(cancelled.WaitForState(v1::CANCELLED, 60s)) << cancelled.Describe();
  got = cluster.client().GetJob(second->id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->cancelled_by(), "alice");
  EXPECT_NE(cluster.coordinator().log().find("(by alice)"), std::string::npos);
}

// Mutual TLS: a worker name is bound to the certificate's CN or a DNS SAN. A certificate the CA
// signed for another name cannot register or heartbeat as w0, and w0 is unaffected; w1's
// certificate (CN=node-1, SAN DNS:w1) is the SAN's positive control.
TEST(SecurityTest, WorkerNamesAreBoundToTheirCertificates) {
  TempDir dir;
  MakeCertificates(dir.path());
  { std::ofstream(dir.File("tokens")) << "s3cret-token alice\n"; }
  ClusterOptions o = Secure(dir.path(), true);
  Cluster cluster(dir.path(), o);
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;  // w0 by CN, w1 by SAN

  auto mallory = WorkerStub(cluster, dir, "mallory");
  grpc::Status s = Register(*mallory, "w0", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("worker name \"w0\" is not bound to certificate CN=mallory"),
            std::string::npos)
      << s.error_message();
  s = Heartbeat(*mallory, "w0", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // The clients' token does not lend it the name either.
  EXPECT_EQ(Register(*mallory, "w0", "s3cret-token").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Its own name it may take.
  EXPECT_TRUE(Register(*mallory, "mallory", "").ok());

  // w0 kept its registration and still trains.
  EXPECT_TRUE(Alive(cluster, "w0"));
  const std::string log = cluster.coordinator().log();
  const size_t first = log.find("worker w0 (");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("worker w0 (", first + 1), std::string::npos) << "w0 was displaced:\n" << log;
  auto job = cluster.client().Submit(kMlp);
  ASSERT_TRUE(job.ok()) << job.status().message();
  testing::JobWatch watch(cluster.client(), job->id());
  EXPECT_TRUE(watch.WaitForState(v1::SUCCEEDED, 60s)) << watch.Describe() << cluster.Logs();
}

// SIGHUP reloads the tokens file: a new token works at once, a removed one is refused, and a
// file that does not parse is reported and leaves the tokens in use.
TEST(SecurityTest, SighupReloadsTheTokensFile) {
  TempDir dir;
  MakeCertificates(dir.path());
  { std::ofstream(dir.File("tokens")) << "s3cret-token alice\n"; }
  ClusterOptions o = Secure(dir.path(), true);
  o.workers = 0;
  Cluster cluster(dir.path(), o);
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  client::ConnectOptions bob;
  bob.coordinator = cluster.address();
  bob.channel.tls.ca = dir.File("ca.pem");
  bob.token = "new-token";
  auto c = client::ServiceClient::Connect(bob);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->ListJobs({}).status().code(), static_cast<StatusCode>(16));

  { std::ofstream(dir.File("tokens")) << "new-token bob\n"; }
  ::kill(cluster.coordinator().pid(), SIGHUP);
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return cluster.coordinator().log().find("tokens file reloaded") != std::string::npos; },
      10s))
      << cluster.coordinator().log();
  EXPECT_TRUE((*c)->ListJobs({}).ok());
  EXPECT_EQ(cluster.client().ListJobs({}).status().code(), static_cast<StatusCode>(16));

  { std::ofstream(dir.File("tokens")) << "no-name-here\n"; }
  ::kill(cluster.coordinator().pid(), SIGHUP);
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        return cluster.coordinator().log().find("the tokens loaded before stay") !=
               std::string::npos;
      },
      10s))
      << cluster.coordinator().log();
  EXPECT_TRUE((*c)->ListJobs({}).ok());
}

}  // namespace
}  // namespace trainyard
