// What every gRPC user here shares: Status <-> grpc::Status, TLS material from files, and
// channels to the coordinator with the transport policy of docs/design/007-service.md:
// TLS when a CA is given (mutual with a client certificate), plaintext only when asked for,
// and then only to a loopback address unless insecure_remote says otherwise.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/flags.h"
#include "common/status.h"

namespace trainyard::rpc {

// Note [Errors that arrive whole]: gRPC sends a status in the response's trailers, and a
// client refuses trailers above its metadata limit (8 KiB by default, soft) with
// RESOURCE_EXHAUSTED instead of the error. So ToGrpc keeps the message within
// kMaxStatusMessageBytes (cut at a line, saying so) and sends the field violations as a
// google.rpc.Status with one google.rpc.BadRequest detail ("grpc-status-details-bin", as
// grpcio-status and grpcurl read it), holding as many violations as fit kMaxViolationBytes
// and then one {field: "", description: "and N more"} (N counting every one left out); the
// google.rpc.Status's own message is the first line of the message, within kMaxSummaryBytes.
// With base64 and percent-encoding, the trailers stay well under 8 KiB. FromGrpc reads them
// back.
inline constexpr size_t kMaxStatusMessageBytes = 1536;
inline constexpr size_t kMaxViolationBytes = 2560;
inline constexpr size_t kMaxSummaryBytes = 256;
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
  // HTTP/2 keepalive pings, sent also without calls: a connection whose peer stopped answering
  // is closed after about keepalive_time + keepalive_timeout, and dialled again by the next
  // call. The coordinator accepts a ping a second (server/main.cc).
  std::chrono::milliseconds keepalive_time{10000};
  std::chrono::milliseconds keepalive_timeout{5000};
  // The longest wait between two attempts to dial a lost connection (gRPC's backoff grows by
  // 1.6x from 1 s up to this; its default of 120 s would keep a worker away for minutes after
  // a long partition heals).
  std::chrono::milliseconds max_reconnect_backoff{120000};
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
