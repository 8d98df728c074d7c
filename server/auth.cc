#include "server/auth.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

namespace trainyard::server {
namespace {

bool ValidName(const std::string& name) {
  return !name.empty() && name.size() <= 63 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
           c == '@';
  });
}

bool ValidPattern(const std::string& p) {
  if (p == "*") return true;
  const std::string stem = !p.empty() && p.back() == '*' ? p.substr(0, p.size() - 1) : p;
  return ValidName(stem);
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

// The token of an "authorization" value "Bearer <token>" (the scheme in any case, RFC 6750),
// or "" when it is not one.
std::string BearerToken(const std::string& value) {
  constexpr size_t kScheme = 6;  // "bearer"
  if (value.size() <= kScheme + 1) return "";
  for (size_t i = 0; i < kScheme; ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != "bearer"[i]) return "";
  }
  size_t start = kScheme;
  if (value[start] != ' ') return "";
  while (start < value.size() && value[start] == ' ') ++start;
  size_t end = value.size();
  while (end > start && value[end - 1] == ' ') --end;
  return value.substr(start, end - start);
}

const char* RoleName(Role r) { return r == Role::kClient ? "client" : "worker"; }

// What a call with `role` needs, for messages.
std::string Needs(Role role) {
  return role == Role::kClient
             ? "this call needs the client role (a client token; --token or TRAINYARD_TOKEN)"
             : "this call needs the worker role (a client certificate signed by the "
               "coordinator's CA, or a token marked worker in the tokens file)";
}

std::vector<std::string> Properties(const grpc::AuthContext& auth, const char* name) {
  std::vector<std::string> out;
  for (const grpc::string_ref& v : auth.FindPropertyValues(name))
    out.emplace_back(v.data(), v.size());
  return out;
}

// The identity of a verified client certificate, or nullopt when the peer presented none.
std::optional<Identity> CertificateIdentity(const grpc::ServerContextBase& ctx, bool client_too) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::nullopt;
  Identity id;
  std::vector<std::string> cn = Properties(*auth, GRPC_X509_CN_PROPERTY_NAME);
  id.name = cn.empty() ? "" : cn[0];
  id.description = "certificate CN=" + id.name;
  id.worker = true;
  id.client = client_too;
  std::set<std::string> names(cn.begin(), cn.end());
  for (const std::string& dns : Properties(*auth, GRPC_PEER_DNS_PROPERTY_NAME)) names.insert(dns);
  id.worker_names.assign(names.begin(), names.end());
  return id;
}

}  // namespace

bool WorkerNameMatches(const std::string& pattern, const std::string& name) {
  if (!pattern.empty() && pattern.back() == '*') {
    return name.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
  }
  return pattern == name;
}

StatusOr<std::vector<TokenEntry>> ParseTokens(const std::string& text, const std::string& source) {
  std::vector<TokenEntry> out;
  std::map<std::string, int> seen;  // token -> line
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    const std::string where = source + " line " + std::to_string(n) + ": ";
    std::istringstream words(line.substr(0, line.find('#')));
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    const std::string format = "expected TOKEN NAME [client | worker | worker=PATTERN]";
    if (w.size() < 2 || w.size() > 3) {
      return InvalidArgumentError(where + "has " + std::to_string(w.size()) + " field" +
                                  (w.size() == 1 ? "" : "s") + "; " + format +
                                  " (every token needs a name for logs and events)");
    }
    TokenEntry e{w[0], w[1], Role::kClient, ""};
    if (!ValidName(e.name)) {
      return InvalidArgumentError(
          where + "name " + Quote(e.name) +
          " must be 1 to 63 characters of A-Z, a-z, 0-9, '-', '.', '_', '@'");
    }
    const std::string role = w.size() == 3 ? w[2] : "client";
    if (role == "worker") {
      e.role = Role::kWorker;
      e.worker_pattern = e.name;
    } else if (role.rfind("worker=", 0) == 0 && ValidPattern(role.substr(7))) {
      e.role = Role::kWorker;
      e.worker_pattern = role.substr(7);
    } else if (role != "client") {
      return InvalidArgumentError(where + "role " + Quote(role) + ": " + format +
                                  " (a PATTERN is a worker name, optionally ending in '*')");
    }
    if (auto [it, fresh] = seen.emplace(e.token, n); !fresh) {
      return InvalidArgumentError(where + "repeats the token of line " +
                                  std::to_string(it->second));
    }
    out.push_back(std::move(e));
  }
  if (out.empty())
    return InvalidArgumentError(source + " holds no token; " +
                                "one per line: TOKEN NAME [client | worker | worker=PATTERN]");
  return out;
}

Status Identity::MayActAsWorker(const std::string& worker) const {
  if (anonymous) return OkStatus();
  for (const std::string& p : worker_names) {
    if (WorkerNameMatches(p, worker)) return OkStatus();
  }
  std::string allowed;
  for (const std::string& p : worker_names) allowed += (allowed.empty() ? "" : ", ") + p;
  return PermissionDeniedError("worker name " + Quote(worker) + " is not bound to " + description +
                               ", which may act as " + (allowed.empty() ? "no worker" : allowed));
}

StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(std::string tokens_file, bool mtls) {
  std::unique_ptr<Authenticator> a(new Authenticator(std::move(tokens_file), mtls));
  if (a->tokens()) RETURN_IF_ERROR(a->Reload().status());
  return a;
}

StatusOr<size_t> Authenticator::Reload() {
  std::ifstream in(tokens_file_);
  if (!in) return InvalidArgumentError("--tokens-file " + tokens_file_ + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  ASSIGN_OR_RETURN(std::vector<TokenEntry> table,
                   ParseTokens(text.str(), "--tokens-file " + tokens_file_));
  const size_t n = table.size();
  std::lock_guard<std::mutex> lock(mu_);
  table_ = std::make_shared<const std::vector<TokenEntry>>(std::move(table));
  return n;
}

std::shared_ptr<const std::vector<TokenEntry>> Authenticator::Table() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_;
}

StatusOr<Identity> Authenticator::Identify(const grpc::ServerContextBase& ctx, Role role) const {
  if (!tokens() && !mtls_) {
    Identity any;
    any.description = "no credential";
    any.client = any.worker = any.anonymous = true;
    return any;
  }
  std::vector<Identity> valid;
  std::string bad_token;  // a token was sent that the table does not hold
  if (tokens()) {
    const auto& md = ctx.client_metadata();
    if (auto it = md.find("authorization"); it != md.end()) {
      const std::string token = BearerToken(std::string(it->second.data(), it->second.size()));
      const auto table = Table();
      auto e = std::find_if(table->begin(), table->end(), [&](const TokenEntry& t) {
        return !token.empty() && t.token == token;
      });
      if (e == table->end()) {
        bad_token = token.empty() ? "a malformed authorization header" : "an unknown bearer token";
      } else {
        Identity id;
        id.name = e->name;
        id.description = std::string(RoleName(e->role)) + " token " + Quote(e->name);
        id.client = e->role == Role::kClient;
        id.worker = e->role == Role::kWorker;
        if (id.worker) id.worker_names = {e->worker_pattern};
        valid.push_back(std::move(id));
      }
    }
  }
  if (mtls_) {
    if (std::optional<Identity> cert = CertificateIdentity(ctx, /*client_too=*/!tokens())) {
      valid.push_back(*std::move(cert));
    }
  }
  for (const Identity& id : valid) {
    if (role == Role::kClient ? id.client : id.worker) return id;
  }
  if (valid.empty()) {
    std::string what = !bad_token.empty() ? bad_token : "no credential";
    std::string hint =
        role == Role::kWorker
            ? (mtls_ ? "worker calls need a client certificate signed by the coordinator's CA "
                       "(trainyard-worker --cert/--key)" +
                           std::string(tokens() ? " or a worker token" : "")
                     : "worker calls need a worker token (trainyard-worker --token)")
            : (tokens() ? "missing or unknown bearer token: pass --token or set TRAINYARD_TOKEN"
                        : "this coordinator requires a client certificate (--cert and --key)");
    return UnauthenticatedError(what + ": " + hint);
  }
  return PermissionDeniedError(valid[0].description + " has the " +
                               RoleName(valid[0].worker ? Role::kWorker : Role::kClient) +
                               " role only; " + Needs(role));
}

}  // namespace trainyard::server
