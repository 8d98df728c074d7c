#include "server/reflection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "proto/rpc.h"

namespace trainyard::server {
namespace {

namespace pb = google::protobuf;

// Note [Wire format]: the field numbers of grpc/reflection/v1/reflection.proto, the same as
// v1alpha's. Requests are read and responses written with protobuf's UnknownFieldSet, which
// speaks the wire format without a schema; the inner messages' fields (numbered 1 and 2) are
// written where each message is built. original_request is the request's bytes as received,
// which for a request encoded as protobuf encodes are v1alpha's bytes too.
// ServerReflectionRequest: host = 1; oneof message_request.
constexpr int kHost = 1;
constexpr int kFileByFilename = 3;             // string
constexpr int kFileContainingSymbol = 4;       // string
constexpr int kFileContainingExtension = 5;    // ExtensionRequest
constexpr int kAllExtensionNumbersOfType = 6;  // string
constexpr int kListServices = 7;               // string, not read
// ExtensionRequest.
constexpr int kContainingType = 1;   // string
constexpr int kExtensionNumber = 2;  // int32
// ServerReflectionResponse: valid_host = 1, original_request = 2; oneof message_response.
constexpr int kValidHost = 1;
constexpr int kOriginalRequest = 2;
constexpr int kFileDescriptorResponse = 4;       // {repeated bytes file_descriptor_proto = 1}
constexpr int kAllExtensionNumbersResponse = 5;  // {base_type_name = 1, repeated int32 = 2}
constexpr int kListServicesResponse = 6;         // {repeated ServiceResponse{name = 1} = 1}
constexpr int kErrorResponse = 7;                // {int32 error_code = 1, error_message = 2}

struct Request {
  std::string host;
  int kind = 0;      // the message_request field set (the last one on the wire); 0: none
  std::string name;  // its string; for an ExtensionRequest, containing_type
  int32_t extension_number = 0;
};

// One message_response: its field number and serialized contents.
struct Reply {
  int field = 0;
  std::string body;
};

std::string Serialized(const pb::UnknownFieldSet& fields) {
  std::string out;
  fields.SerializeToString(&out);
  return out;
}

// These two return false when `bytes` is not well-formed protobuf, or a field known to be a
// string or a message is not length-delimited (or an int32 not a varint).
bool ParseExtensionRequest(const std::string& bytes, Request* r) {
  pb::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return false;
  for (int i = 0; i < fields.field_count(); ++i) {
    const pb::UnknownField& f = fields.field(i);
    if (f.number() == kContainingType) {
      if (f.type() != pb::UnknownField::TYPE_LENGTH_DELIMITED) return false;
      r->name = f.length_delimited();
    } else if (f.number() == kExtensionNumber) {
      if (f.type() != pb::UnknownField::TYPE_VARINT) return false;
      r->extension_number = static_cast<int32_t>(f.varint());
    }
  }
  return true;
}

// Protobuf's rules: unknown fields are skipped; of the oneof's fields, the last one wins, and
// a message field seen twice in a row merges.
bool ParseRequest(const std::string& bytes, Request* r) {
  pb::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return false;
  for (int i = 0; i < fields.field_count(); ++i) {
    const pb::UnknownField& f = fields.field(i);
    const int n = f.number();
    if (n != kHost && (n < kFileByFilename || n > kListServices)) continue;
    if (f.type() != pb::UnknownField::TYPE_LENGTH_DELIMITED) return false;
    if (n == kHost) {
      r->host = f.length_delimited();
      continue;
    }
    if (n == kFileContainingExtension) {
      if (r->kind != kFileContainingExtension) {
        r->name.clear();
        r->extension_number = 0;
      }
      if (!ParseExtensionRequest(f.length_delimited(), r)) return false;
    } else {
      r->name = f.length_delimited();
    }
    r->kind = n;
  }
  return true;
}

Reply Error(StatusCode code, const std::string& message) {
  pb::UnknownFieldSet body;
  body.AddVarint(1, static_cast<uint64_t>(code));
  body.AddLengthDelimited(2, message);
  return {kErrorResponse, Serialized(body)};
}

// `file`, then those of its transitive dependencies not in `sent`, depth first (v1alpha's
// order), each as a serialized FileDescriptorProto.
void AddFiles(const pb::FileDescriptor* file, bool asked_for, std::set<std::string>* sent,
              pb::UnknownFieldSet* body) {
  if (!sent->insert(file->name()).second && !asked_for) return;
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  body->AddLengthDelimited(1, proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFiles(file->dependency(i), false, sent, body);
  }
}

Reply Files(const pb::FileDescriptor* file, const std::string& what, std::set<std::string>* sent) {
  if (file == nullptr) {
    return Error(StatusCode::kNotFound, what + " not found: this server has no descriptor for it");
  }
  pb::UnknownFieldSet body;
  AddFiles(file, true, sent, &body);
  return {kFileDescriptorResponse, Serialized(body)};
}

Reply ExtensionNumbers(const std::string& type_name) {
  const pb::DescriptorPool& pool = *pb::DescriptorPool::generated_pool();
  const pb::Descriptor* type = pool.FindMessageTypeByName(type_name);
  if (type == nullptr) {
    return Error(StatusCode::kNotFound, "message type \"" + type_name + "\" not found");
  }
  std::vector<const pb::FieldDescriptor*> extensions;
  pool.FindAllExtensions(type, &extensions);
  std::string packed;  // a packed repeated int32: varints, negatives sign-extended to 64 bits
  for (const pb::FieldDescriptor* e : extensions) {
    uint64_t v = static_cast<uint64_t>(int64_t{e->number()});
    for (; v >= 0x80; v >>= 7) packed.push_back(static_cast<char>((v & 0x7f) | 0x80));
    packed.push_back(static_cast<char>(v));
  }
  pb::UnknownFieldSet body;
  body.AddLengthDelimited(1, type_name);
  if (!packed.empty()) body.AddLengthDelimited(2, packed);
  return {kAllExtensionNumbersResponse, Serialized(body)};
}

Reply ServiceList(const std::vector<std::string>& services) {
  pb::UnknownFieldSet body;
  for (const std::string& name : services) {
    pb::UnknownFieldSet service;
    service.AddLengthDelimited(1, name);
    body.AddLengthDelimited(1, Serialized(service));
  }
  return {kListServicesResponse, Serialized(body)};
}

Reply ReplyTo(const Request& r, const std::vector<std::string>& services,
              std::set<std::string>* sent) {
  const pb::DescriptorPool& pool = *pb::DescriptorPool::generated_pool();
  switch (r.kind) {
    case kFileByFilename:
      return Files(pool.FindFileByName(r.name), "file \"" + r.name + "\"", sent);
    case kFileContainingSymbol:
      return Files(pool.FindFileContainingSymbol(r.name), "symbol \"" + r.name + "\"", sent);
    case kFileContainingExtension: {
      const pb::Descriptor* type = pool.FindMessageTypeByName(r.name);
      const pb::FieldDescriptor* extension =
          type == nullptr ? nullptr : pool.FindExtensionByNumber(type, r.extension_number);
      return Files(extension == nullptr ? nullptr : extension->file(),
                   "extension " + std::to_string(r.extension_number) + " of \"" + r.name + "\"",
                   sent);
    }
    case kAllExtensionNumbersOfType:
      return ExtensionNumbers(r.name);
    case kListServices:
      return ServiceList(services);
    default:
      return Error(StatusCode::kInvalidArgument,
                   "the request sets no message_request; set one of file_by_filename, "
                   "file_containing_symbol, file_containing_extension, "
                   "all_extension_numbers_of_type or list_services");
  }
}

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// One ServerReflectionInfo stream: read a request, write its answer, read the next, until the
// client closes its side. Only one operation is ever outstanding, so no lock is needed.
class ReflectionReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit ReflectionReactor(const std::vector<std::string>* services) : session_(services) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client is done (or the call ended)
      Finish(grpc::Status::OK);
      return;
    }
    StatusOr<std::string> answer = session_.Answer(ToString(request_));
    if (!answer.ok()) {
      Finish(rpc::ToGrpc(answer.status()));
      return;
    }
    grpc::Slice slice(*std::move(answer));
    response_ = grpc::ByteBuffer(&slice, 1);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "reflection: the stream broke"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  ReflectionSession session_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

}  // namespace

StatusOr<std::string> ReflectionSession::Answer(const std::string& request) {
  Request r;
  if (!ParseRequest(request, &r)) {
    return InvalidArgumentError(
        "reflection: the message is not a grpc.reflection.v1.ServerReflectionRequest");
  }
  const Reply reply = ReplyTo(r, *services_, &sent_files_);
  pb::UnknownFieldSet response;
  if (!r.host.empty()) response.AddLengthDelimited(kValidHost, r.host);
  response.AddLengthDelimited(kOriginalRequest, request);
  response.AddLengthDelimited(reply.field, reply.body);
  return Serialized(response);
}

grpc::ServerGenericBidiReactor* ReflectionV1::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  if (ctx->method() != kMethod) return grpc::CallbackGenericService::CreateReactor(ctx);
  return new ReflectionReactor(&services_);
}

}  // namespace trainyard::server
