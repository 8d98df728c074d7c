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
  // Workers ping every 5 s, also between calls (worker/daemon/main.cc), to notice a dead
  // connection promptly after a partition: accept up to one ping a second.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
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

// The coordinator process: Start opens everything the flags name (each error says which
// flag or file), Serve ticks until SIGINT or SIGTERM, Stop fails the health checks first and
// then stops the servers. Members are declared in the order they must be built: the services
// outlive the servers that call them.
class CoordinatorServer {
 public:
  explicit CoordinatorServer(const Flags& f) : f_(f) {}

  Status Start() {
    ASSIGN_OR_RETURN(auth_, server::Authenticator::Create(f_.Get("tokens-file"),
                                                          !f_.Get("tls-client-ca").empty()));
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, ServerCredentials(f_));
    ASSIGN_OR_RETURN(coordinator_, OpenCoordinator(f_));
    RETURN_IF_ERROR(StartMetrics());
    client_service_ = std::make_unique<server::CoordinatorService>(coordinator_.get(), auth_.get());
    worker_service_ = std::make_unique<server::WorkerService>(
        coordinator_.get(), auth_.get(),
        [this](double s) { metrics_->ObserveHeartbeatLatency(s); });
    int port = 0;
    server_ =
        StartApiServer(f_.Get("listen"), creds, {client_service_.get(), worker_service_.get()},
                       &reflection_v1_, &port);
    if (!server_) return UnavailableError("cannot listen on " + f_.Get("listen"));
    address_ = Bound(f_.Get("listen"), port);
    if (const std::string& hlisten = f_.Get("health-listen"); !hlisten.empty()) {
      int hport = 0;
      ASSIGN_OR_RETURN(health_server_, StartHealthServer(hlisten, &hport));
      health_address_ = Bound(hlisten, hport);
    }
    Announce();
    return OkStatus();
  }

  // Ticks the coordinator and refreshes the metrics ten times a second until `stop`.
  void Serve(const std::atomic<bool>& stop) {
    while (!stop.load()) {
      ReloadTokensIfAsked(*auth_);
      coordinator_->Tick();
      metrics_->Update(coordinator_->GetSnapshot());
      std::this_thread::sleep_for(100ms);
    }
  }

  void Stop() {
    TY_LOG(INFO) << "coordinator stopping";
    for (const char* name : kServiceNames) {
      server_->GetHealthCheckService()->SetServingStatus(name, false);
    }
    // The streams end now (watchers hear UNAVAILABLE), not at the shutdown deadline.
    client_service_->Stop();
    worker_service_->Stop();
    if (health_server_) health_server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
  }

 private:
  Status StartMetrics() {
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(f_.Get("metrics-listen"));
    } catch (const std::exception& e) {
      return InvalidArgumentError("--metrics-listen " + f_.Get("metrics-listen") + ": " + e.what());
    }
    registry_ = std::make_shared<prometheus::Registry>();
    exposer_->RegisterCollectable(registry_);
    metrics_ = std::make_unique<server::CoordinatorMetrics>(*registry_);
    const auto ports = exposer_->GetListeningPorts();
    metrics_address_ = Bound(f_.Get("metrics-listen"), ports.empty() ? 0 : ports[0]);
    return OkStatus();
  }

  // The log line saying where everything is, and the ready file.
  void Announce() const {
    TY_LOG(INFO) << "coordinator listening on " << address_ << " ("
                 << (f_.Get("tls-cert").empty() ? "plaintext"
                     : auth_->mtls()            ? "mutual TLS"
                                                : "TLS")
                 << (auth_->tokens() ? ", tokens" : "") << "), metrics on http://"
                 << metrics_address_ << "/metrics, jobs in " << f_.Get("state-dir") << "/jobs.db"
                 << (health_address_.empty() ? "" : ", health (plaintext) on " + health_address_);
    if (!f_.Get("ready-file").empty()) {
      WriteReadyFile(f_.Get("ready-file"), {address_, metrics_address_, health_address_});
    }
  }

  const Flags& f_;
  std::unique_ptr<server::Authenticator> auth_;
  std::unique_ptr<server::Coordinator> coordinator_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<server::CoordinatorMetrics> metrics_;
  std::unique_ptr<server::CoordinatorService> client_service_;
  std::unique_ptr<server::WorkerService> worker_service_;
  // grpc.reflection.v1, which gRPC 1.51's plugin lacks and grpcurl and Postman try first.
  server::ReflectionV1 reflection_v1_{
      {"trainyard.v1.Coordinator", "trainyard.v1.Worker", "grpc.health.v1.Health",
       "grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"}};
  std::unique_ptr<grpc::Server> server_, health_server_;
  std::string address_, metrics_address_, health_address_;
};

int Run(const Flags& f) {
  InstallReloadSignal();
  CoordinatorServer server(f);
  if (Status s = server.Start(); !s.ok()) return Fail(std::string(s.message()));
  ScopedStopSignals signals(OnSignal);
  server.Serve(g_stop);
  server.Stop();
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
  if (std::optional<int> code = f.ParseOrExit(std::vector<std::string>(argv + 1, argv + argc),
                                              "trainyard-coordinator", 0)) {
    return *code;
  }
  return Run(f);
}
