// ReflectionV1 (server/reflection.h) in a real grpc::Server on loopback, beside what
// server/main.cc serves with it: the sync Coordinator and Worker services, default health
// checking and the v1alpha reflection plugin. A generic client asks both reflection versions
// the same questions; v1alpha, gRPC's own implementation, checks the encoding byte for byte.
#include "server/reflection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/descriptor_database.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard::server {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr char kV1alpha[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
const std::vector<std::string> kServices = {
    "trainyard.v1.Coordinator", "trainyard.v1.Worker", "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"};
constexpr char kJobProto[] = "trainyard/v1/job.proto";
constexpr char kServiceProto[] = "trainyard/v1/service.proto";

// ServerReflectionRequest's message_request fields, and the message_response fields.
constexpr int kByFilename = 3, kBySymbol = 4, kByExtension = 5, kExtensionsOf = 6, kList = 7;
constexpr int kFiles = 4, kExtensionNumbers = 5, kServiceList = 6, kError = 7;

std::string Serialized(const pb::UnknownFieldSet& fields) {
  std::string out;
  fields.SerializeToString(&out);
  return out;
}

// ServerReflectionRequest{host, <field>: value} as protobuf writes it (fields in number order).
std::string Request(int field, const std::string& value, const std::string& host = "") {
  pb::UnknownFieldSet r;
  if (!host.empty()) r.AddLengthDelimited(1, host);
  if (field != 0) r.AddLengthDelimited(field, value);
  return Serialized(r);
}

std::string ExtensionRequest(const std::string& type, int number) {
  pb::UnknownFieldSet e;
  e.AddLengthDelimited(1, type);
  e.AddVarint(2, number);
  return Request(kByExtension, Serialized(e));
}

// A ServerReflectionResponse, read field by field.
struct Response {
  std::string valid_host;
  std::string original_request;
  int kind = 0;                         // the message_response field; 0: none, or not a response
  std::vector<std::string> files;       // kFiles: file names, in the order sent
  std::vector<std::string> file_bytes;  // kFiles: serialized FileDescriptorProtos
  std::vector<std::string> services;    // kServiceList
  std::string base_type_name;           // kExtensionNumbers
  int error_code = 0;                   // kError
  std::string error_message;
};

Response Decode(const std::string& bytes) {
  Response r;
  pb::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return r;
  for (int i = 0; i < fields.field_count(); ++i) {
    const pb::UnknownField& f = fields.field(i);
    pb::UnknownFieldSet body;
    if (f.number() == 1) r.valid_host = f.length_delimited();
    if (f.number() == 2) r.original_request = f.length_delimited();
    if (f.number() < 4 || !body.ParseFromString(f.length_delimited())) continue;
    r.kind = f.number();
    for (int j = 0; j < body.field_count(); ++j) {
      const pb::UnknownField& b = body.field(j);
      if (r.kind == kFiles) {
        pb::FileDescriptorProto file;
        EXPECT_TRUE(file.ParseFromString(b.length_delimited()));
        r.files.push_back(file.name());
        r.file_bytes.push_back(b.length_delimited());
      } else if (r.kind == kServiceList) {
        pb::UnknownFieldSet service;
        EXPECT_TRUE(service.ParseFromString(b.length_delimited()) && service.field_count() == 1);
        if (service.field_count() > 0) r.services.push_back(service.field(0).length_delimited());
      } else if (r.kind == kExtensionNumbers && b.number() == 1) {
        r.base_type_name = b.length_delimited();
      } else if (r.kind == kError) {
        if (b.number() == 1) r.error_code = static_cast<int>(b.varint());
        if (b.number() == 2) r.error_message = b.length_delimited();
      }
    }
  }
  return r;
}

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// One bidi stream through a GenericStub (completion-queue API); every step is bounded by the
// call's deadline. One operation at a time.
class Stream {
 public:
  Stream(grpc::GenericStub* stub, const std::string& method) {
    ctx_.set_deadline(std::chrono::system_clock::now() + 10s);
    call_ = stub->PrepareCall(&ctx_, method, &cq_);
    call_->StartCall(this);
    live_ = Next();
  }
  ~Stream() {
    if (!finished_) {
      ctx_.TryCancel();
      (void)Finish();
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  bool Write(const std::string& message) {
    if (!live_) return false;
    grpc::Slice slice(message);
    grpc::ByteBuffer buffer(&slice, 1);
    call_->Write(buffer, this);
    return live_ = Next();
  }
  // The next message; nullopt once the stream has ended (Finish says how).
  std::optional<std::string> Read() {
    if (!live_) return std::nullopt;
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, this);
    if (!(live_ = Next())) return std::nullopt;
    return ToString(buffer);
  }
  std::optional<std::string> Ask(const std::string& request) {
    return Write(request) ? Read() : std::nullopt;
  }
  // Closes this side (if still open) and returns the call's status.
  grpc::Status Finish() {
    if (live_) {
      call_->WritesDone(this);
      live_ = Next();
    }
    grpc::Status status;
    call_->Finish(&status, this);
    Next();
    finished_ = true;
    return status;
  }

 private:
  bool Next() {
    void* tag;
    bool ok = false;
    return cq_.Next(&tag, &ok) && ok;
  }

  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool live_ = false;
  bool finished_ = false;
};

// Answers ListWorkers itself (OK, no workers), so a call that reaches the sync service is told
// apart from one that the generic service turned away.
class CoordinatorWithListWorkers final : public trainyard::v1::Coordinator::Service {
  grpc::Status ListWorkers(grpc::ServerContext*, const trainyard::v1::ListWorkersRequest*,
                           trainyard::v1::ListWorkersResponse*) override {
    return grpc::Status::OK;
  }
};

class ReflectionV1Test : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&coordinator_);
    builder.RegisterService(&worker_);
    builder.RegisterCallbackGenericService(&reflection_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port != 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
  }

  // The response to `request` as the first message of a new stream to `method`.
  std::string AskOnce(const std::string& method, const std::string& request) {
    Stream stream(stub_.get(), method);
    std::optional<std::string> response = stream.Ask(request);
    EXPECT_TRUE(response.has_value()) << method;
    EXPECT_TRUE(stream.Finish().ok()) << method;
    return response.value_or("");
  }

  CoordinatorWithListWorkers coordinator_;
  trainyard::v1::Worker::Service worker_;
  ReflectionV1 reflection_{kServices};
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(ReflectionV1Test, ListsTheServicesItWasGiven) {
  Stream stream(stub_.get(), ReflectionV1::kMethod);
  std::optional<std::string> bytes = stream.Ask(Request(kList, ""));
  ASSERT_TRUE(bytes.has_value());
  const Response r = Decode(*bytes);
  EXPECT_EQ(r.kind, kServiceList);
  EXPECT_EQ(r.services, kServices);
  EXPECT_TRUE(stream.Finish().ok());
  // v1alpha lists what the server registered by name: all of them but the generic service.
  EXPECT_THAT(Decode(AskOnce(kV1alpha, Request(kList, ""))).services,
              UnorderedElementsAre(kServices[0], kServices[1], kServices[2], kServices[3]));
}

TEST_F(ReflectionV1Test, DescribesJobSpecWithTheFileThatDeclaresIt) {
  const std::string request = Request(kBySymbol, "trainyard.v1.JobSpec");
  const std::string bytes = AskOnce(ReflectionV1::kMethod, request);
  const Response r = Decode(bytes);
  ASSERT_EQ(r.kind, kFiles) << r.error_message;
  ASSERT_FALSE(r.files.empty());
  EXPECT_EQ(r.files[0], kJobProto);
  EXPECT_EQ(r.original_request, request);
  // A client builds the descriptors from the files alone (grpcurl's `describe`): JobSpec is
  // there, and its file is the one compiled into this process.
  pb::SimpleDescriptorDatabase files;
  for (const std::string& b : r.file_bytes) {
    pb::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(b));
    ASSERT_TRUE(files.Add(file));
  }
  pb::DescriptorPool pool(&files);
  const pb::Descriptor* spec = pool.FindMessageTypeByName("trainyard.v1.JobSpec");
  ASSERT_NE(spec, nullptr);
  EXPECT_NE(spec->FindFieldByName("batch_size"), nullptr);
  EXPECT_EQ(spec->FindFieldByName("model")->message_type()->full_name(), "trainyard.v1.ModelSpec");
  EXPECT_EQ(spec->file()->DebugString(),
            trainyard::v1::JobSpec::descriptor()->file()->DebugString());
  // gRPC's v1alpha gives the same bytes.
  EXPECT_EQ(bytes, AskOnce(kV1alpha, request));
}

TEST_F(ReflectionV1Test, SendsAMethodsFileWithItsDependencies) {
  const std::string request = Request(kBySymbol, "trainyard.v1.Coordinator.SubmitJob");
  const std::string bytes = AskOnce(ReflectionV1::kMethod, request);
  const Response r = Decode(bytes);
  ASSERT_FALSE(r.files.empty()) << r.error_message;
  EXPECT_EQ(r.files[0], kServiceProto);
  EXPECT_THAT(r.files, Contains(kJobProto));
  EXPECT_EQ(bytes, AskOnce(kV1alpha, request));
}

// The spec lets a server skip files sent earlier on the stream; the file asked for is always
// sent, first (clients read the first file as the answer).
TEST_F(ReflectionV1Test, SendsEachDependencyOncePerStream) {
  Stream stream(stub_.get(), ReflectionV1::kMethod);
  std::optional<std::string> first = stream.Ask(Request(kBySymbol, "trainyard.v1.JobSpec"));
  ASSERT_TRUE(first.has_value());
  EXPECT_THAT(Decode(*first).files, Contains(kJobProto));
  std::optional<std::string> second =
      stream.Ask(Request(kBySymbol, "trainyard.v1.Coordinator.SubmitJob"));
  ASSERT_TRUE(second.has_value());
  const Response r = Decode(*second);
  ASSERT_FALSE(r.files.empty()) << r.error_message;
  EXPECT_EQ(r.files[0], kServiceProto);
  EXPECT_THAT(r.files, Not(Contains(kJobProto)));
  std::optional<std::string> third = stream.Ask(Request(kBySymbol, "trainyard.v1.JobSpec.seed"));
  ASSERT_TRUE(third.has_value());
  EXPECT_THAT(Decode(*third).files, ElementsAre(kJobProto));
  std::optional<std::string> fourth = stream.Ask(Request(kByFilename, kServiceProto));
  ASSERT_TRUE(fourth.has_value());
  EXPECT_THAT(Decode(*fourth).files, ElementsAre(kServiceProto));
  EXPECT_TRUE(stream.Finish().ok());
  // A new stream starts afresh.
  EXPECT_THAT(Decode(AskOnce(ReflectionV1::kMethod, Request(kByFilename, kServiceProto))).files,
              Contains(kJobProto));
}

TEST_F(ReflectionV1Test, FindsEverySymbolKindAsV1alphaDoes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"trainyard.v1.Coordinator", kServiceProto},
      {"trainyard.v1.Worker.Heartbeat", kServiceProto},  // a method
      {"trainyard.v1.SubmitJobRequest", kServiceProto},
      {"trainyard.v1.ModelSpec", kJobProto},
      {"trainyard.v1.JobSpec.batch_size", kJobProto},  // a field
      {"trainyard.v1.JobState", kServiceProto},
      {"trainyard.v1.RUNNING", kServiceProto},  // an enum value, in its enum's scope
      {"trainyard.v1.Diagnosis.Kind", kServiceProto},
      {"trainyard.v1.Diagnosis.HANG", kServiceProto},
      {"google.protobuf.DescriptorProto.ExtensionRange", "google/protobuf/descriptor.proto"},
  };
  for (const auto& [symbol, file] : cases) {
    const std::string request = Request(kBySymbol, symbol);
    const std::string bytes = AskOnce(ReflectionV1::kMethod, request);
    const Response r = Decode(bytes);
    ASSERT_FALSE(r.files.empty()) << symbol << ": " << r.error_message;
    EXPECT_EQ(r.files[0], file) << symbol;
    EXPECT_EQ(bytes, AskOnce(kV1alpha, request)) << symbol;
  }
  const std::string by_name = Request(kByFilename, kJobProto);
  EXPECT_EQ(AskOnce(ReflectionV1::kMethod, by_name), AskOnce(kV1alpha, by_name));
  EXPECT_EQ(Decode(AskOnce(ReflectionV1::kMethod, by_name)).files[0], kJobProto);
}

TEST_F(ReflectionV1Test, AnswersUnknownNamesNotFoundNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {Request(kBySymbol, "trainyard.v1.NoSuchThing"), "symbol \"trainyard.v1.NoSuchThing\""},
      {Request(kByFilename, "trainyard/v1/none.proto"), "file \"trainyard/v1/none.proto\""},
      {ExtensionRequest("trainyard.v1.JobSpec", 1000), "1000 of \"trainyard.v1.JobSpec\""},
      {Request(kExtensionsOf, "trainyard.v1.Nope"), "\"trainyard.v1.Nope\""},
  };
  for (const auto& [request, named] : cases) {
    const Response r = Decode(AskOnce(ReflectionV1::kMethod, request));
    EXPECT_EQ(r.kind, kError) << named;
    EXPECT_EQ(r.error_code, static_cast<int>(grpc::StatusCode::NOT_FOUND)) << named;
    EXPECT_THAT(r.error_message, HasSubstr(named));
    EXPECT_EQ(r.original_request, request);
    const Response alpha = Decode(AskOnce(kV1alpha, request));
    EXPECT_EQ(alpha.kind, kError) << named;
    EXPECT_EQ(alpha.error_code, r.error_code) << named;
  }
}

TEST_F(ReflectionV1Test, ListsExtensionNumbersAsV1alphaDoes) {
  for (const char* type : {"trainyard.v1.JobSpec", "google.protobuf.FileOptions"}) {
    const std::string request = Request(kExtensionsOf, type);
    const std::string bytes = AskOnce(ReflectionV1::kMethod, request);
    EXPECT_EQ(Decode(bytes).kind, kExtensionNumbers) << type;
    EXPECT_EQ(Decode(bytes).base_type_name, type);
    EXPECT_EQ(bytes, AskOnce(kV1alpha, request)) << type;
  }
}

TEST_F(ReflectionV1Test, AnswersARequestWithoutAQuestionInvalidArgumentAndGoesOn) {
  Stream stream(stub_.get(), ReflectionV1::kMethod);
  std::optional<std::string> bytes = stream.Ask(Request(0, "", "coordinator:7600"));
  ASSERT_TRUE(bytes.has_value());
  const Response r = Decode(*bytes);
  EXPECT_EQ(r.kind, kError);
  EXPECT_EQ(r.error_code, static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(r.error_message, HasSubstr("list_services"));
  EXPECT_EQ(r.valid_host, "coordinator:7600");
  std::optional<std::string> next = stream.Ask(Request(kList, ""));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(Decode(*next).services, kServices);
  EXPECT_TRUE(stream.Finish().ok());
}

// Requests written before any answer is read are answered one each, in order, host echoed.
TEST_F(ReflectionV1Test, AnswersEachRequestInOrderEchoingTheHost) {
  const std::vector<std::string> requests = {
      Request(kList, "", "a:1"), Request(kBySymbol, "trainyard.v1.JobSpec", "b:2"),
      Request(kBySymbol, "trainyard.v1.Nope", "c:3"), Request(kByFilename, kServiceProto, "d:4")};
  Stream stream(stub_.get(), ReflectionV1::kMethod);
  for (const std::string& request : requests) ASSERT_TRUE(stream.Write(request));
  std::vector<std::string> hosts;
  for (const std::string& request : requests) {
    std::optional<std::string> bytes = stream.Read();
    ASSERT_TRUE(bytes.has_value());
    const Response r = Decode(*bytes);
    EXPECT_EQ(r.original_request, request);
    hosts.push_back(r.valid_host);
  }
  EXPECT_THAT(hosts, ElementsAre("a:1", "b:2", "c:3", "d:4"));
  EXPECT_TRUE(stream.Finish().ok());
  EXPECT_EQ(AskOnce(ReflectionV1::kMethod, requests[1]), AskOnce(kV1alpha, requests[1]));
}

TEST_F(ReflectionV1Test, EndsTheStreamInvalidArgumentOnAMessageThatIsNotARequest) {
  // A truncated varint, and a host (field 1, a string) written as a varint.
  for (const std::string& garbage : {std::string("\xff\xff"), std::string("\x08\x01")}) {
    Stream stream(stub_.get(), ReflectionV1::kMethod);
    EXPECT_FALSE(stream.Ask(garbage).has_value());
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                HasSubstr("not a grpc.reflection.v1.ServerReflectionRequest"));
  }
}

TEST_F(ReflectionV1Test, AnswersOtherUnknownMethodsUnimplemented) {
  for (const char* method :
       {"/trainyard.v1.NoSuchService/Call", "/grpc.reflection.v1.ServerReflection/Other",
        "/trainyard.v1.Coordinator/NoSuchMethod"}) {
    Stream stream(stub_.get(), method);
    EXPECT_FALSE(stream.Ask(Request(kList, "")).has_value()) << method;
    EXPECT_EQ(stream.Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED) << method;
  }
}

TEST_F(ReflectionV1Test, SyncServicesStillAnswerBesideTheGenericService) {
  auto coordinator = trainyard::v1::Coordinator::NewStub(channel_);
  auto worker = trainyard::v1::Worker::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    trainyard::v1::ListWorkersResponse response;
    EXPECT_TRUE(coordinator->ListWorkers(&ctx, {}, &response).ok());  // the override
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    trainyard::v1::GetJobResponse response;
    const grpc::Status s = coordinator->GetJob(&ctx, {}, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);  // the default implementation
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    trainyard::v1::RegisterWorkerResponse response;
    const grpc::Status s = worker->RegisterWorker(&ctx, {}, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
}

// The session alone, without a server (STYLE.md habit 3).
TEST(ReflectionSessionTest, AnswersListServicesAndRefusesAMessageThatIsNotARequest) {
  const std::vector<std::string> services = {"a.B", "c.D"};
  ReflectionSession session(&services);
  StatusOr<std::string> answer = session.Answer(Request(kList, "*"));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(Decode(*answer).services, services);
  EXPECT_EQ(Decode(*answer).original_request, Request(kList, "*"));
  EXPECT_EQ(session.Answer("\xff\xff").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::server
