#include "proto/rpc.h"

#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/net_address.h"

namespace trainyard::rpc {
namespace {

constexpr const char* kBadRequestType = "type.googleapis.com/google.rpc.BadRequest";

// The few google.rpc messages below are built as protobuf UnknownFieldSets (field numbers,
// not generated code): google.rpc's .proto files are not among Debian's packages, and these
// are three small, stable messages.
using google::protobuf::UnknownFieldSet;

std::string Serialized(const UnknownFieldSet& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

// google.rpc.BadRequest.FieldViolation{field = 1, description = 2}.
std::string EncodeViolation(const FieldViolation& v) {
  UnknownFieldSet m;
  m.AddLengthDelimited(1, v.field);
  m.AddLengthDelimited(2, v.description);
  return Serialized(m);
}

// google.rpc.Status{code = 1, message = 2, details = 3 (Any{type_url = 1, value = 2})} with one
// BadRequest{field_violations = 1} detail holding what fits kMaxViolationBytes.
std::string EncodeDetails(int code, const std::string& message,
                          const std::vector<FieldViolation>& violations) {
  UnknownFieldSet bad_request;
  size_t bytes = 0;
  size_t i = 0;
  for (; i < violations.size(); ++i) {
    std::string one = EncodeViolation(violations[i]);
    if (bytes + one.size() + 64 > kMaxViolationBytes) break;
    bytes += 1 + (one.size() < 128 ? 1 : 2) + one.size();  // its tag, length and bytes
    bad_request.AddLengthDelimited(1, one);
  }
  if (i < violations.size()) {
    // The list may end in its own {"", "and N more"} (ProblemsStatus caps it too): those N
    // count among the ones left out here.
    size_t left_out = violations.size() - i;
    const FieldViolation& last = violations.back();
    if (last.field.empty() && last.description.rfind("and ", 0) == 0) {
      left_out += std::strtoull(last.description.c_str() + 4, nullptr, 10) - 1;
    }
    bad_request.AddLengthDelimited(
        1, EncodeViolation({"", "and " + std::to_string(left_out) + " more"}));
  }
  UnknownFieldSet any, status;
  any.AddLengthDelimited(1, kBadRequestType);
  any.AddLengthDelimited(2, Serialized(bad_request));
  status.AddVarint(1, static_cast<uint64_t>(code));
  status.AddLengthDelimited(2, message);
  status.AddLengthDelimited(3, Serialized(any));
  return Serialized(status);
}

// The length-delimited fields numbered `field` of the message `bytes` (empty if it does not
// parse).
std::vector<std::string> Fields(const std::string& bytes, int field) {
  UnknownFieldSet set;
  std::vector<std::string> out;
  if (!set.ParseFromString(bytes)) return out;
  for (int i = 0; i < set.field_count(); ++i) {
    const google::protobuf::UnknownField& f = set.field(i);
    if (f.number() == field && f.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      out.push_back(f.length_delimited());
    }
  }
  return out;
}

std::vector<FieldViolation> DecodeViolations(const std::string& details) {
  std::vector<FieldViolation> out;
  for (const std::string& any : Fields(details, 3)) {
    const std::vector<std::string> type = Fields(any, 1);
    if (type.empty() || type[0] != kBadRequestType) continue;
    for (const std::string& value : Fields(any, 2)) {
      for (const std::string& v : Fields(value, 1)) {
        const std::vector<std::string> field = Fields(v, 1), description = Fields(v, 2);
        out.push_back({field.empty() ? "" : field[0], description.empty() ? "" : description[0]});
      }
    }
  }
  return out;
}

// `message` within kMaxStatusMessageBytes: cut after the last whole line that fits (or at a
// UTF-8 boundary), saying how much was left out.
std::string CapMessage(const std::string& message) {
  if (message.size() <= kMaxStatusMessageBytes) return message;
  const std::string note = "\n  ... (" + std::to_string(message.size()) + " bytes; cut)";
  size_t cut = message.rfind('\n', kMaxStatusMessageBytes - note.size());
  if (cut == std::string::npos || cut == 0) {
    cut = kMaxStatusMessageBytes - note.size();
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xc0) == 0x80) --cut;
  }
  return message.substr(0, cut) + note;
}

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const std::string message = CapMessage(s.message());
  const auto code = static_cast<grpc::StatusCode>(s.code());
  if (s.field_violations().empty()) return grpc::Status(code, message);
  // The details' own message is the first line (the summary): the whole one is beside it, and
  // sent twice it would crowd the trailers.
  std::string summary = message.substr(0, std::min(message.find('\n'), kMaxSummaryBytes));
  while (!summary.empty() && summary.size() < message.size() &&
         (static_cast<unsigned char>(message[summary.size()]) & 0xc0) == 0x80) {
    summary.pop_back();  // not in the middle of a UTF-8 character
  }
  return grpc::Status(code, message,
                      EncodeDetails(static_cast<int>(code), summary, s.field_violations()));
}

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return OkStatus();
  Status out(static_cast<StatusCode>(s.error_code()), s.error_message());
  if (s.error_details().empty()) return out;
  return out.WithFieldViolations(DecodeViolations(s.error_details()));
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
  return net::IsLoopbackHost(net::SplitHostPort(address).first);
}

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                     const ChannelOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Keepalive: a dead peer is noticed on a quiet stream too.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(o.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(o.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // keepalive on an idle connection too
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(o.max_reconnect_backoff.count()));
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
  f.Value("coordinator", "",
          "host:port of the coordinator (default $TRAINYARD_COORDINATOR or 127.0.0.1:7600)")
      .Value("token", "", "bearer token (default $TRAINYARD_TOKEN)")
      .Value("ca-cert", "",
             "PEM CA of the coordinator's certificate: TLS (default $TRAINYARD_CA_CERT)")
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
