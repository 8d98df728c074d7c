// Security with the real coordinator: bearer tokens for client calls, mutual TLS for workers.
// The certificates are made by openssl for each test: a CA, the coordinator's (for
// 127.0.0.1) and a worker's client certificate.
#include <gtest/gtest.h>

#include <grpcpp/generic/generic_stub.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::ClusterOptions;
using testing::TempDir;

// Makes ca.pem, server.pem/.key and worker.pem/.key in `dir`.
void MakeCertificates(const std::string& dir) {
  const std::string script =
      "set -e; cd " + dir + "; "
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=trainyard-test-ca "
      "  -keyout ca.key -out ca.pem 2>/dev/null; "
      "for who in server worker; do "
      "  openssl req -newkey rsa:2048 -nodes -subj /CN=$who -keyout $who.key -out $who.csr 2>/dev/null; "
      "  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > $who.ext; "
      "  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "    -extfile $who.ext -out $who.pem 2>/dev/null; "
      "done";
  ASSERT_EQ(std::system(script.c_str()), 0) << "openssl failed";
}

ClusterOptions Secure(const std::string& dir, bool worker_certs) {
  ClusterOptions o;
  o.coordinator_flags = {"--tls-cert", dir + "/server.pem", "--tls-key", dir + "/server.key",
                         "--tls-client-ca", dir + "/ca.pem", "--tokens-file", dir + "/tokens"};
  o.worker_flags = {"--ca-cert", dir + "/ca.pem"};
  if (worker_certs) {
    o.worker_flags.insert(o.worker_flags.end(),
                          {"--cert", dir + "/worker.pem", "--key", dir + "/worker.key"});
  }
  o.connect.channel.tls.ca = dir + "/ca.pem";
  o.connect.token = "s3cret-token";
  return o;
}

// grpc.health.v1.Health/Check{service: ""} (an empty message) over `channel`, as the kubelet's
// gRPC probe calls it; the response's bytes go to `response` (SERVING is 08 01).
grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel, std::string* response) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::Slice empty(std::string(""));
  grpc::ByteBuffer in(&empty, 1), out;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &in, &out,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  std::vector<grpc::Slice> slices;
  (void)out.Dump(&slices);
  for (const auto& sl : slices) {
    response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return status;
}

// --health-listen: probes that speak neither TLS nor tokens (the kubelet's) get an answer on
// a plaintext port of their own, which serves nothing of the API.
TEST(SecurityTest, HealthListenerAnswersPlaintextProbesAndServesNothingElse) {
  TempDir dir;
  MakeCertificates(dir.path());
  { std::ofstream(dir.File("tokens")) << "s3cret-token\n"; }
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
  { std::ofstream(dir.File("tokens")) << "# one per line\ns3cret-token alice\n"; }
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
  testing::ProcessResult r = testing::RunProcess(
      {std::string(TY_BIN_DIR) + "/trainyard", "list", "--coordinator", cluster.address(),
       "--ca-cert", dir.File("ca.pem")},
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
  with.channel.tls = {dir.File("ca.pem"), dir.File("worker.pem"), dir.File("worker.key")};
  auto c = client::ServiceClient::Connect(with);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->ListJobs({}).ok());
}

TEST(SecurityTest, WorkerWithoutAClientCertificateIsRefusedUnderMutualTls) {
  TempDir dir;
  MakeCertificates(dir.path());
  { std::ofstream(dir.File("tokens")) << "s3cret-token\n"; }
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

  // Even with the clients' token, a worker call needs the certificate.
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
  EXPECT_EQ(stub->RegisterWorker(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);

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

}  // namespace
}  // namespace trainyard
