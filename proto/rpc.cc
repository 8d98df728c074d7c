#include "proto/rpc.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace trainyard::rpc {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(s.error_code()), s.error_message());
}

StatusOr<std::string> ReadPem(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError(what + " " + path + ": cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN") == std::string::npos) {
    return InvalidArgumentError(what + " " + path + ": not a PEM file");
  }
  return ss.str();
}

bool IsLoopback(const std::string& address) {
  std::string host = address;
  if (!host.empty() && host[0] == '[') {
    host = host.substr(1, host.find(']') - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return host == "localhost" || host == "::1";
}

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                     const ChannelOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Keepalive: a dead peer is noticed on a quiet stream too.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls.enabled()) {
    grpc::SslCredentialsOptions ssl;
    if (!o.tls.ca.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(o.tls.ca, "CA certificate"));
    }
    if (!o.tls.cert.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(o.tls.cert, "certificate"));
      if (o.tls.key.empty()) return InvalidArgumentError("a certificate needs its key (--key)");
      ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(o.tls.key, "key"));
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    if (!IsLoopback(address) && !o.plaintext_remote) {
      return InvalidArgumentError(
          "refusing plaintext to " + address +
          ", which is not a loopback address: give the coordinator's CA (--ca-cert) for TLS, or "
          "allow plaintext explicitly (--insecure)");
    }
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

void AddCallerFlags(Flags& f) {
  f.Value("coordinator", "", "host:port of the coordinator (default $TRAINYARD_COORDINATOR or 127.0.0.1:7600)")
      .Value("token", "", "bearer token (default $TRAINYARD_TOKEN)")
      .Value("ca-cert", "", "PEM CA of the coordinator's certificate: TLS (default $TRAINYARD_CA_CERT)")
      .Value("cert", "", "PEM client certificate, for mutual TLS (default $TRAINYARD_CERT)")
      .Value("key", "", "PEM key of --cert (default $TRAINYARD_KEY)")
      .Value("tls-server-name", "", "name to check in the coordinator's certificate")
      .Switch("insecure", "allow plaintext to a non-loopback coordinator");
}

CallerOptions ReadCallerFlags(const Flags& f) {
  auto get = [&](const char* flag, const char* env) {
    if (!f.Get(flag).empty()) return f.Get(flag);
    const char* v = std::getenv(env);
    return std::string(v ? v : "");
  };
  CallerOptions o;
  if (std::string c = get("coordinator", "TRAINYARD_COORDINATOR"); !c.empty()) o.coordinator = c;
  o.token = get("token", "TRAINYARD_TOKEN");
  o.channel.tls = {get("ca-cert", "TRAINYARD_CA_CERT"), get("cert", "TRAINYARD_CERT"),
                   get("key", "TRAINYARD_KEY")};
  o.channel.tls_server_name = f.Get("tls-server-name");
  o.channel.plaintext_remote = f.On("insecure");
  return o;
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace trainyard::rpc
