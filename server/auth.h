// Who a call to the coordinator comes from, and what it may do (docs/design/007-service.md,
// "Security"). Two roles: a client may call the Coordinator service (submit, list, cancel,
// watch); a worker may call the Worker service (register, heartbeat, report metrics, the
// rendezvous store) under the worker names its credential is bound to. Credentials:
//
//   - a bearer token from the tokens file (--tokens-file), one per line:
//       TOKEN NAME [client | worker | worker=PATTERN]     # '#' starts a comment
//     NAME appears in logs and events ("submitted by alice"). A client token (the default
//     role) may call the Coordinator service only. A worker token may call the Worker service
//     only, as the worker named NAME, or as any worker whose name matches PATTERN ("gpu-*":
//     the names starting with gpu-; "*": any name, so every holder of the token can register
//     as any worker, a deliberate choice for nodes that share one token).
//   - a client certificate that the coordinator's CA (--tls-client-ca) signed: a worker
//     credential for the names in its CN and DNS SANs; with no tokens file it is also a client
//     credential (the CA is then the only credential there is).
//   - nothing, when the coordinator asks for neither (plaintext on loopback, `trainyard local`):
//     every caller has both roles and any worker name.
//
// A missing or unknown credential is UNAUTHENTICATED; a valid one without the role, or a worker
// name it is not bound to, is PERMISSION_DENIED naming what is missing. Thread-safe: Reload
// (on SIGHUP) swaps the token table while calls are checked.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace grpc {
class ServerContextBase;
}

namespace trainyard::server {

enum class Role { kClient, kWorker };

struct TokenEntry {
  std::string token;
  std::string name;
  Role role = Role::kClient;
  std::string worker_pattern;  // workers: NAME, or the PATTERN of worker=PATTERN
};

// Parses a tokens file's text (format above). InvalidArgument names `source`, the line and
// what is wrong; a file with no token is an error too.
StatusOr<std::vector<TokenEntry>> ParseTokens(const std::string& text, const std::string& source);

// Whether `name` matches a worker pattern: equal, or a prefix match for a trailing '*'.
bool WorkerNameMatches(const std::string& pattern, const std::string& name);

// The credential a call was checked against.
struct Identity {
  std::string name;         // the token's name, the certificate's CN; "" when anonymous
  std::string description;  // for messages: client token "alice", certificate CN=w0, ...
  bool client = false;      // holds the client role
  bool worker = false;      // holds the worker role
  // Worker names it may act as (patterns as above); for a certificate, its CN and DNS SANs.
  std::vector<std::string> worker_names;
  bool anonymous = false;  // no authentication configured: everything is allowed

  // OK when it may act as worker `name`; else PermissionDenied naming both.
  Status MayActAsWorker(const std::string& name) const;
};

class Authenticator {
 public:
  // `tokens_file`: "" for none (then the file is never read). `mtls`: client certificates
  // are required by TLS and verified against the coordinator's client CA.
  static StatusOr<std::unique_ptr<Authenticator>> Create(std::string tokens_file, bool mtls);

  // Reads the tokens file again; on an error the table in use stays, and the error says so.
  // Returns the number of tokens loaded.
  StatusOr<size_t> Reload();

  // The caller's identity for a call that needs `role`: Unauthenticated (code 16) without a
  // valid credential, PermissionDenied with one that lacks the role.
  StatusOr<Identity> Identify(const grpc::ServerContextBase& ctx, Role role) const;

  bool tokens() const { return !tokens_file_.empty(); }
  bool mtls() const { return mtls_; }

 private:
  Authenticator(std::string tokens_file, bool mtls)
      : tokens_file_(std::move(tokens_file)), mtls_(mtls) {}
  std::shared_ptr<const std::vector<TokenEntry>> Table() const;

  const std::string tokens_file_;
  const bool mtls_;
  mutable std::mutex mu_;
  std::shared_ptr<const std::vector<TokenEntry>> table_;
};

}  // namespace trainyard::server
