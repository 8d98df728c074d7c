// Security with the real coordinator: bearer tokens for client calls, mutual TLS for workers.
// The certificates are made by openssl for each test: a CA, the coordinator's (for
// 127.0.0.1) and a worker's client certificate.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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
