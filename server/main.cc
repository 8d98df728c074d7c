// trainyard-coordinator: serves the Coordinator and Worker gRPC services (with health checking
// and reflection; --health-listen adds a plaintext port with health checking alone, for probes)
// and a Prometheus /metrics endpoint, keeps jobs in a SQLite file, and ticks the coordinator's
// checks. SIGINT / SIGTERM stop it; a restart carries on from the file.
#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "common/durable_file.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/signals.h"
#include "proto/rpc.h"
#include "server/coordinator_metrics.h"
#include "server/grpc_services.h"
#include "server/reflection.h"

namespace {

using namespace trainyard;
using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
void OnSignal(int) { g_stop = true; }
void OnHangup(int) { g_reload = true; }

// SIGHUP re-reads the tokens file (operators rotate tokens without a restart); a file that does
// not read keeps the tokens in use.
void InstallReloadSignal() {
  struct sigaction action = {};
  action.sa_handler = OnHangup;
  sigemptyset(&action.sa_mask);
  sigaction(SIGHUP, &action, nullptr);
}

void ReloadTokensIfAsked(server::Authenticator& auth) {
  if (!g_reload.exchange(false) || !auth.tokens()) return;
  StatusOr<size_t> n = auth.Reload();
  if (n.ok()) {
    TY_LOG(INFO) << "tokens file reloaded (SIGHUP): " << *n << " tokens";
  } else {
    TY_LOG(ERROR) << "tokens file not reloaded (SIGHUP), the tokens loaded before stay: "
                  << n.status().message();
  }
}

// The services health checking answers for by name, besides "" (the server as a whole).
const char* const kServiceNames[] = {"trainyard.v1.Coordinator", "trainyard.v1.Worker"};

int Fail(const std::string& message) {
  std::fprintf(stderr, "trainyard-coordinator: error: %s\n", message.c_str());
  return 1;
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const Flags& f) {
  if (f.Get("tls-cert").empty()) {
    if (!f.Get("tls-client-ca").empty()) {
      return InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    if (!rpc::IsLoopback(f.Get("listen")) && !f.On("insecure-plaintext")) {
      return InvalidArgumentError("--listen " + f.Get("listen") +
                                  " is not a loopback address: give --tls-cert and --tls-key, "
                                  "or allow plaintext explicitly with --insecure-plaintext");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, rpc::ReadPem(f.Get("tls-cert"), "--tls-cert"));
  ASSIGN_OR_RETURN(pair.private_key, rpc::ReadPem(f.Get("tls-key"), "--tls-key"));
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!f.Get("tls-client-ca").empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, rpc::ReadPem(f.Get("tls-client-ca"), "--tls-client-ca"));
    // Clients (the CLI) may come with a token instead; workers must present a certificate
    // (checked per call in grpc_services.cc).
    ssl.client_certificate_request = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// The kubelet's gRPC probes speak plaintext and send no token, so with TLS on they cannot reach
// the main port. This second server, plaintext, serves grpc.health.v1 alone (the default
// health service, SERVING while it runs) and nothing of the API; it is stopped before the main
// server, so a stopping coordinator fails its probes first.
StatusOr<std::unique_ptr<grpc::Server>> StartHealthServer(const std::string& address, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) {
    return UnavailableError("--health-listen " + address + ": cannot listen");
  }
  return server;
}

// The coordinator on --state-dir's store, which it locks (one coordinator per directory: two
// would each believe they own every job). Errors say which flag or file.
StatusOr<std::unique_ptr<server::Coordinator>> OpenCoordinator(const Flags& f) {
  ASSIGN_OR_RETURN(double hb_timeout, f.Double("heartbeat-timeout", 0.1, 3600));
  ASSIGN_OR_RETURN(double hb_interval, f.Double("heartbeat-interval", 0.01, 600));
  if (hb_timeout <= hb_interval) {
    return InvalidArgumentError("--heartbeat-timeout " + f.Get("heartbeat-timeout") +
                                " must be longer than --heartbeat-interval " +
                                f.Get("heartbeat-interval"));
  }
  const std::string state_dir = f.Get("state-dir");
  ::mkdir(state_dir.c_str(), 0755);
  const std::string lock_path = state_dir + "/coordinator.lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return FailedPreconditionError("another trainyard-coordinator uses " + state_dir + " (" +
                                   lock_path + " is locked); stop it or give another --state-dir");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<server::JobStore> store,
                   server::OpenSqliteJobStore(state_dir + "/jobs.db"));
  server::CoordinatorOptions options;
  options.heartbeat_timeout = std::chrono::milliseconds(std::llround(hb_timeout * 1000));
  options.heartbeat_interval = std::chrono::milliseconds(std::llround(hb_interval * 1000));
  options.checkpoint_root = f.Get("checkpoint-root");
  return server::Coordinator::Create(std::move(store), Clock::Real(), options);
}

// The API server on `listen`: both services, health checking (SERVING per service name),
// reflection v1alpha and `reflection_v1`, which must outlive it. Null when it cannot listen.
std::unique_ptr<grpc::Server> StartApiServer(const std::string& listen,
                                             const std::shared_ptr<grpc::ServerCredentials>& creds,
                                             std::vector<grpc::Service*> services,
                                             server::ReflectionV1* reflection_v1, int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // v1alpha
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(reflection_v1);
  builder.AddListeningPort(listen, creds, port);
  builder.SetMaxReceiveMessageSize(rpc::kMaxMessageBytes);
  builder.SetMaxSendMessageSize(rpc::kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) return nullptr;
  for (const char* name : kServiceNames) {
    server->GetHealthCheckService()->SetServingStatus(name, true);
  }
  return server;
}

// "host:port" of `listen` ("host:0" or "host:N") with the port it got.
std::string Bound(const std::string& listen, int port) {
  return listen.substr(0, listen.rfind(':')) + ":" + std::to_string(port);
}

// The addresses, one per line, written whole for whoever waits on them.
void WriteReadyFile(const std::string& path, const std::vector<std::string>& addresses) {
  std::string text;
  for (const std::string& a : addresses) {
    if (!a.empty()) text += a + "\n";
  }
  if (Status s = WriteFileAtomically(path, text); !s.ok()) {
    TY_LOG(ERROR) << "--ready-file: " << s.message();
  }
}

int Run(const Flags& f) {
  InstallReloadSignal();
  StatusOr<std::unique_ptr<server::Authenticator>> auth =
      server::Authenticator::Create(f.Get("tokens-file"), !f.Get("tls-client-ca").empty());
  if (!auth.ok()) return Fail(std::string(auth.status().message()));
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(f);
  if (!creds.ok()) return Fail(std::string(creds.status().message()));
  StatusOr<std::unique_ptr<server::Coordinator>> coordinator = OpenCoordinator(f);
  if (!coordinator.ok()) return Fail(std::string(coordinator.status().message()));

  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(f.Get("metrics-listen"));
  } catch (const std::exception& e) {
    return Fail("--metrics-listen " + f.Get("metrics-listen") + ": " + e.what());
  }
  auto registry = std::make_shared<prometheus::Registry>();
  exposer->RegisterCollectable(registry);
  server::CoordinatorMetrics metrics(*registry);

  std::atomic<bool> stopping{false};
  server::CoordinatorService client_service(coordinator->get(), auth->get(), &stopping);
  server::WorkerService worker_service(coordinator->get(), auth->get(), &stopping,
                                       [&](double s) { metrics.ObserveHeartbeatLatency(s); });
  // grpc.reflection.v1, which gRPC 1.51's plugin lacks and grpcurl and Postman try first.
  server::ReflectionV1 reflection_v1(
      {"trainyard.v1.Coordinator", "trainyard.v1.Worker", "grpc.health.v1.Health",
       "grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"});
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartApiServer(
      f.Get("listen"), *creds, {&client_service, &worker_service}, &reflection_v1, &port);
  if (!server) return Fail("cannot listen on " + f.Get("listen"));

  std::unique_ptr<grpc::Server> health_server;
  std::string health_address;
  if (const std::string& hlisten = f.Get("health-listen"); !hlisten.empty()) {
    int hport = 0;
    StatusOr<std::unique_ptr<grpc::Server>> started = StartHealthServer(hlisten, &hport);
    if (!started.ok()) return Fail(std::string(started.status().message()));
    health_server = *std::move(started);
    health_address = Bound(hlisten, hport);
  }

  const std::string address = Bound(f.Get("listen"), port);
  const auto metrics_ports = exposer->GetListeningPorts();
  const std::string metrics_address =
      Bound(f.Get("metrics-listen"), metrics_ports.empty() ? 0 : metrics_ports[0]);
  TY_LOG(INFO) << "coordinator listening on " << address << " ("
               << (f.Get("tls-cert").empty() ? "plaintext"
                   : (*auth)->mtls()         ? "mutual TLS"
                                             : "TLS")
               << ((*auth)->tokens() ? ", tokens" : "") << "), metrics on http://"
               << metrics_address << "/metrics, jobs in " << f.Get("state-dir") << "/jobs.db"
               << (health_address.empty() ? "" : ", health (plaintext) on " + health_address);
  if (!f.Get("ready-file").empty()) {
    WriteReadyFile(f.Get("ready-file"), {address, metrics_address, health_address});
  }

  ScopedStopSignals signals(OnSignal);
  while (!g_stop.load()) {
    ReloadTokensIfAsked(**auth);
    (*coordinator)->Tick();
    metrics.Update((*coordinator)->GetSnapshot());
    std::this_thread::sleep_for(100ms);
  }
  TY_LOG(INFO) << "coordinator stopping";
  for (const char* name : kServiceNames) {
    server->GetHealthCheckService()->SetServingStatus(name, false);
  }
  stopping = true;
  if (health_server) health_server->Shutdown(std::chrono::system_clock::now() + 1s);
  server->Shutdown(std::chrono::system_clock::now() + 2s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f("usage: trainyard-coordinator [flags]\n\nflags:");
  f.Value("listen", "127.0.0.1:7600", "gRPC address (port 0 picks one)")
      .Value("metrics-listen", "127.0.0.1:9600", "Prometheus /metrics address (port 0 picks one)")
      .Value("state-dir", "trainyard-state", "directory of the job store (jobs.db)")
      .Value("checkpoint-root", "",
             "checkpoints of jobs without checkpoint.dir go to ROOT/<job id>")
      .Value("heartbeat-interval", "1", "seconds between a worker's heartbeats")
      .Value("heartbeat-timeout", "10", "seconds without a heartbeat until a worker is lost")
      .Value("tls-cert", "", "PEM certificate chain of this server (turns TLS on)")
      .Value("tls-key", "", "PEM private key of --tls-cert")
      .Value("tls-client-ca", "", "PEM CA of client certificates: mutual TLS, required of workers")
      .Value("tokens-file", "",
             "bearer tokens, one per line: TOKEN NAME [client|worker|worker=PATTERN] "
             "(re-read on SIGHUP)")
      .Switch("insecure-plaintext", "allow plaintext on a non-loopback --listen")
      .Value("health-listen", "",
             "plaintext address serving only grpc.health.v1, for probes (off when empty)")
      .Value("ready-file", "", "write the gRPC, metrics (and health) addresses here once serving");
  if (std::optional<int> code =
          f.ParseOrExit(std::vector<std::string>(argv + 1, argv + argc), "trainyard-coordinator", 0)) {
    return *code;
  }
  return Run(f);
}
