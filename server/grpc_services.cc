#include "server/grpc_services.h"

#include <google/protobuf/message.h>
#include <google/protobuf/unknown_field_set.h>

#include "common/json.h"
#include "common/logging.h"
#include "proto/rpc.h"

namespace trainyard::server {
namespace {

using namespace std::chrono_literals;
namespace v1 = ::trainyard::v1;

Rendezvous::Scope ScopeOf(const v1::StoreScope& s) { return {s.job_id(), s.attempt(), s.secret()}; }

// Store waits are capped per call so that a server shutdown never waits on them for long; the
// client (worker/daemon/grpc_store.h) calls again until its own timeout.
std::chrono::milliseconds StoreTimeout(int64_t ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, 30000));
}

}  // namespace

// Declares `caller`, the identity of the call's credential, or returns the refusal.
#define TY_IDENTIFY(caller, role)                                  \
  StatusOr<Identity> caller##_or = auth_->Identify(*ctx, role);    \
  if (!caller##_or.ok()) return rpc::ToGrpc(caller##_or.status()); \
  const Identity& caller = *caller##_or;                           \
  (void)caller

namespace {

using google::protobuf::FieldDescriptor;

Json FieldValue(const google::protobuf::Message& m, const FieldDescriptor* f, int i);

// The spec's JSON form (job.proto's field names, integers as JSON numbers, as a spec file
// writes them), with a member "#<number>" for each field this build does not know (a newer
// client's), which the spec reader then refuses by name.
Json SpecToJson(const google::protobuf::Message& m) {
  const google::protobuf::Reflection* r = m.GetReflection();
  Json out = Json::Object();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (!f->is_repeated()) {
      out.Set(f->name(), FieldValue(m, f, -1));
      continue;
    }
    Json items = Json::Array();
    for (int i = 0; i < r->FieldSize(m, f); ++i) items.Append(FieldValue(m, f, i));
    out.Set(f->name(), std::move(items));
  }
  const google::protobuf::UnknownFieldSet& unknown = r->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    out.Set("#" + std::to_string(unknown.field(i).number()), Json(true));
  }
  return out;
}

// Field `f` of `m`; element `i` of a repeated field, or -1 for a singular one.
Json FieldValue(const google::protobuf::Message& m, const FieldDescriptor* f, int i) {
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return Json(rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return Json(rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return Json(rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return Json(rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Json(rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return Json(static_cast<double>(rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f)));
    case FieldDescriptor::CPPTYPE_BOOL:
      return Json(rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f));
    case FieldDescriptor::CPPTYPE_STRING:
      return Json(rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f));
    case FieldDescriptor::CPPTYPE_ENUM:
      return Json((rep ? r->GetRepeatedEnum(m, f, i) : r->GetEnum(m, f))->name());
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return SpecToJson(rep ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f));
  }
  return Json();
}

}  // namespace

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* ctx,
                                           const v1::SubmitJobRequest* req,
                                           v1::SubmitJobResponse* resp) {
  TY_IDENTIFY(caller, Role::kClient);
  if (req->spec_source_case() == v1::SubmitJobRequest::SPEC_SOURCE_NOT_SET) {
    return rpc::ToGrpc(
        InvalidArgumentError("no spec: set spec_json (JSON text) or spec (a JobSpec)"));
  }
  const std::string spec = req->spec_source_case() == v1::SubmitJobRequest::kSpec
                               ? SpecToJson(req->spec()).Dump()
                               : req->spec_json();
  StatusOr<v1::Job> job = c_->Submit(spec, caller.name);
  if (!job.ok()) return rpc::ToGrpc(job.status());
  *resp->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                        v1::GetJobResponse* resp) {
  TY_IDENTIFY(caller, Role::kClient);
  StatusOr<v1::Job> job = c_->GetJob(req->id());
  if (!job.ok()) return rpc::ToGrpc(job.status());
  *resp->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                          v1::ListJobsResponse* resp) {
  TY_IDENTIFY(caller, Role::kClient);
  StatusOr<v1::ListJobsResponse> out = c_->ListJobs(*req);
  if (!out.ok()) return rpc::ToGrpc(out.status());
  *resp = *std::move(out);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* ctx,
                                           const v1::CancelJobRequest* req,
                                           v1::CancelJobResponse* resp) {
  TY_IDENTIFY(caller, Role::kClient);
  StatusOr<v1::Job> job = c_->Cancel(req->id(), req->checkpoint(), caller.name);
  if (!job.ok()) return rpc::ToGrpc(job.status());
  *resp->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::JobEvent>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* req) {
  return NewWatchStream({c_, auth_, &streams_, nullptr, nullptr}, ctx, req);
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* ctx,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* resp) {
  TY_IDENTIFY(caller, Role::kClient);
  for (v1::WorkerInfo& w : c_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status WorkerService::RegisterWorker(grpc::ServerContext* ctx,
                                           const v1::RegisterWorkerRequest* req,
                                           v1::RegisterWorkerResponse* resp) {
  TY_IDENTIFY(caller, Role::kWorker);
  if (Status s = caller.MayActAsWorker(req->name()); !s.ok()) {
    TY_LOG(WARNING) << "refused RegisterWorker as " << req->name() << ": " << s.message();
    return rpc::ToGrpc(s);
  }
  StatusOr<v1::RegisterWorkerResponse> out = c_->RegisterWorker(*req);
  if (!out.ok()) return rpc::ToGrpc(out.status());
  *resp = *std::move(out);
  return grpc::Status::OK;
}

grpc::ServerBidiReactor<v1::WorkerHeartbeat, v1::WorkerCommand>* WorkerService::Heartbeat(
    grpc::CallbackServerContext* ctx) {
  return NewHeartbeatStream(Env(), ctx);
}

grpc::ServerReadReactor<v1::MetricsReport>* WorkerService::ReportMetrics(
    grpc::CallbackServerContext* ctx, v1::ReportMetricsResponse* resp) {
  return NewMetricsStream(Env(), ctx, resp);
}

grpc::Status WorkerService::StoreSet(grpc::ServerContext* ctx, const v1::StoreSetRequest* req,
                                     v1::StoreSetResponse*) {
  TY_IDENTIFY(caller, Role::kWorker);
  return rpc::ToGrpc(c_->rendezvous().Set(ScopeOf(req->scope()), req->key(), req->value()));
}

grpc::Status WorkerService::StoreGet(grpc::ServerContext* ctx, const v1::StoreGetRequest* req,
                                     v1::StoreGetResponse* resp) {
  TY_IDENTIFY(caller, Role::kWorker);
  StatusOr<std::string> v =
      c_->rendezvous().Get(ScopeOf(req->scope()), req->key(), StoreTimeout(req->timeout_ms()));
  if (!v.ok()) return rpc::ToGrpc(v.status());
  resp->set_value(*std::move(v));
  return grpc::Status::OK;
}

grpc::Status WorkerService::StoreWait(grpc::ServerContext* ctx, const v1::StoreWaitRequest* req,
                                      v1::StoreWaitResponse*) {
  TY_IDENTIFY(caller, Role::kWorker);
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  return rpc::ToGrpc(
      c_->rendezvous().Wait(ScopeOf(req->scope()), keys, StoreTimeout(req->timeout_ms())));
}

grpc::Status WorkerService::StoreAdd(grpc::ServerContext* ctx, const v1::StoreAddRequest* req,
                                     v1::StoreAddResponse* resp) {
  TY_IDENTIFY(caller, Role::kWorker);
  StatusOr<int64_t> v = c_->rendezvous().Add(ScopeOf(req->scope()), req->key(), req->delta());
  if (!v.ok()) return rpc::ToGrpc(v.status());
  resp->set_value(*v);
  return grpc::Status::OK;
}

}  // namespace trainyard::server
