// gRPC calls as a generic tool (grpcurl, a kubelet probe) makes them: method names and
// hand-encoded messages, so a test needs neither service's generated code.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace trainyard::testing {

inline std::string Bytes(grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// A unary call of `method` ("/package.Service/Method") with the request's wire bytes; the
// response's bytes go to `response`. Deadline 10 s.
inline grpc::Status GenericUnary(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& method, const std::string& request,
                                 std::string* response) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &in, &out,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  *response = Bytes(out);
  return status;
}

// One request and its response on the server reflection stream `method` (v1alpha's or v1's
// ServerReflectionInfo); "" when the stream failed. Deadline 10 s.
inline std::string ReflectionExchange(const std::shared_ptr<grpc::Channel>& channel,
                                      const std::string& method, const std::string& request) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto stream = stub.PrepareCall(&ctx, method, &cq);
  void* tag;
  bool ok = false;
  std::string answer;
  stream->StartCall(reinterpret_cast<void*>(1));
  if (cq.Next(&tag, &ok) && ok) {
    grpc::Slice req(request);
    grpc::ByteBuffer in(&req, 1), out;
    stream->Write(in, reinterpret_cast<void*>(2));
    if (cq.Next(&tag, &ok) && ok) {
      stream->Read(&out, reinterpret_cast<void*>(3));
      if (cq.Next(&tag, &ok) && ok) answer = Bytes(out);
    }
  }
  ctx.TryCancel();
  grpc::Status s;
  stream->Finish(&s, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return answer;
}

}  // namespace trainyard::testing
