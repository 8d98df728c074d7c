// grpc.reflection.v1.ServerReflection: the server reflection service that current tools
// (grpcurl, grpcui, Postman) ask for first, falling back to v1alpha only on some versions.
// Debian 12's gRPC (1.51) ships only v1alpha (grpc::reflection::
// InitProtoReflectionServerBuilderPlugin) and no v1 code. v1's messages are v1alpha's on the
// wire (same fields and numbers, another package), so ReflectionV1 serves them without
// generated code: a callback generic service that handles the one method, reads each request
// and writes each response in the wire format itself (reflection.cc, Note [Wire format]), and
// answers from the descriptors compiled into this process
// (google::protobuf::DescriptorPool::generated_pool()), as v1alpha does. A service or type not
// compiled in (grpc.health.v1.Health: gRPC implements it without protobuf; this service itself)
// is listed but cannot be described, by either version.
//
// In server/main.cc, beside the v1alpha plugin:
//   server::ReflectionV1 reflection({"trainyard.v1.Coordinator", ...});  // must outlive the server
//   builder.RegisterCallbackGenericService(&reflection);
// A server has one generic service, and it receives every method that no registered service
// serves: ReflectionV1 answers all but its own UNIMPLEMENTED, as a server without it would.
//
// Thread-safe: ReflectionV1 does not change after construction and serves any number of
// streams at once; a stream's messages are handled one at a time, in order.
#pragma once

#include <grpcpp/generic/async_generic_service.h>

#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::server {

// The answers of one reflection stream, without the network: one response per request. A file
// is answered with the transitive dependencies that this stream has not been sent yet (a client
// needs them to build the file's descriptor; the spec lets a server skip those sent before);
// the file asked for itself is always sent, first, since clients take the first file as the
// answer. Not thread-safe: one stream, one session.
class ReflectionSession {
 public:
  // `services`: the names list_services answers; must outlive the session.
  explicit ReflectionSession(const std::vector<std::string>* services) : services_(services) {}

  // `request`: a serialized grpc.reflection.v1.ServerReflectionRequest. Returns the serialized
  // ServerReflectionResponse; what is wrong with the question (an unknown symbol or file, no
  // request set) is answered inside it, as an error_response. InvalidArgument only when
  // `request` is not a ServerReflectionRequest at all.
  StatusOr<std::string> Answer(const std::string& request);

 private:
  const std::vector<std::string>* services_;
  std::set<std::string> sent_files_;  // names of the files this stream has been sent
};

class ReflectionV1 final : public grpc::CallbackGenericService {
 public:
  static constexpr char kMethod[] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";

  // `services`: the full names of the services the server registers (list_services' answer),
  // this one ("grpc.reflection.v1.ServerReflection") included.
  explicit ReflectionV1(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  const std::vector<std::string> services_;
};

}  // namespace trainyard::server
