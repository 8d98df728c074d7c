// What every gRPC user here shares: Status <-> grpc::Status, TLS material from files, and
// channels to the coordinator with the transport policy of docs/design/007-service.md:
// TLS when a CA is given (mutual with a client certificate), plaintext only when asked for,
// and then only to a loopback address unless insecure_remote says otherwise.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/flags.h"
#include "common/status.h"

namespace trainyard::rpc {

grpc::Status ToGrpc(const Status& s);
Status FromGrpc(const grpc::Status& s);

// PEM files of a TLS identity; empty paths are unset.
struct TlsFiles {
  std::string ca;    // the CA that signed the other side's certificate
  std::string cert;  // this side's certificate chain
  std::string key;   // and its private key
  bool enabled() const { return !ca.empty() || !cert.empty(); }
};

// The whole file, or InvalidArgument naming `what` and the path.
StatusOr<std::string> ReadPem(const std::string& path, const std::string& what);

// True for an address in 127.0.0.0/8, ::1 and "localhost" (with or without a port).
bool IsLoopback(const std::string& address);

struct ChannelOptions {
  TlsFiles tls;
  bool plaintext_remote = false;  // allow plaintext to a non-loopback address
  std::string tls_server_name;    // overrides the name checked in the server's certificate
};

// A channel to `address` ("host:port"); InvalidArgument when the policy refuses it.
StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                     const ChannelOptions& options);

// Where and how a process calls the coordinator: the CLI and the worker daemon alike.
struct CallerOptions {
  std::string coordinator = "127.0.0.1:7600";  // host:port
  std::string token;                           // bearer token; "" sends none
  ChannelOptions channel;
};

// Declares --coordinator, --token, --ca-cert, --cert, --key, --tls-server-name and --insecure;
// ReadCallerFlags reads them, each unset one from TRAINYARD_COORDINATOR, TRAINYARD_TOKEN,
// TRAINYARD_CA_CERT, TRAINYARD_CERT or TRAINYARD_KEY.
void AddCallerFlags(Flags& f);
CallerOptions ReadCallerFlags(const Flags& f);

// Adds "authorization: Bearer <token>" when token is not empty.
void AddToken(grpc::ClientContext* ctx, const std::string& token);

// The most a message may be, either way (specs are at most 1 MiB; see service.proto).
inline constexpr int kMaxMessageBytes = 8 << 20;

}  // namespace trainyard::rpc
