#include "server/grpc_services.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "proto/rpc.h"

namespace trainyard::server {
namespace {

using namespace std::chrono_literals;
namespace v1 = ::trainyard::v1;

bool HasClientCertificate(const grpc::ServerContext* ctx) {
  auto auth = ctx->auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated();
}

bool HasToken(const grpc::ServerContext* ctx, const AuthPolicy& auth) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return false;
  const std::string value(it->second.data(), it->second.size());
  return value.rfind("Bearer ", 0) == 0 && auth.tokens.count(value.substr(7)) > 0;
}

grpc::Status CheckClient(const grpc::ServerContext* ctx, const AuthPolicy& auth) {
  // Under mutual TLS without tokens a client must present a certificate: the CA is then the
  // only credential there is.
  if ((auth.tokens.empty() && !auth.mtls) || HasToken(ctx, auth) || HasClientCertificate(ctx)) {
    return grpc::Status::OK;
  }
  if (auth.tokens.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this coordinator requires a client certificate (--cert and --key)");
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or unknown bearer token: pass --token or set TRAINYARD_TOKEN");
}

grpc::Status CheckWorker(const grpc::ServerContext* ctx, const AuthPolicy& auth) {
  if (auth.mtls) {
    if (HasClientCertificate(ctx)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "worker calls need a client certificate signed by the coordinator's CA "
                        "(trainyard-worker --cert/--key)");
  }
  return CheckClient(ctx, auth);
}

Rendezvous::Scope ScopeOf(const v1::StoreScope& s) { return {s.job_id(), s.attempt(), s.secret()}; }

// Store waits are capped per call so that a server shutdown never waits on them for long; the
// client (worker/daemon/grpc_store.h) calls again until its own timeout.
std::chrono::milliseconds StoreTimeout(int64_t ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, 30000));
}

}  // namespace

#define TY_CHECK_CALLER(check)                      \
  do {                                              \
    grpc::Status _auth = (check)(ctx, auth_);       \
    if (!_auth.ok()) return _auth;                  \
  } while (0)

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* ctx,
                                           const v1::SubmitJobRequest* req,
                                           v1::SubmitJobResponse* resp) {
  TY_CHECK_CALLER(CheckClient);
  StatusOr<v1::Job> job = c_->Submit(req->spec_json());
  if (!job.ok()) return rpc::ToGrpc(job.status());
  *resp->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                        v1::GetJobResponse* resp) {
  TY_CHECK_CALLER(CheckClient);
  StatusOr<v1::Job> job = c_->GetJob(req->id());
  if (!job.ok()) return rpc::ToGrpc(job.status());
  *resp->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* ctx,
                                          const v1::ListJobsRequest* req,
                                          v1::ListJobsResponse* resp) {
  TY_CHECK_CALLER(CheckClient);
  StatusOr<v1::ListJobsResponse> out = c_->ListJobs(*req);
  if (!out.ok()) return rpc::ToGrpc(out.status());
  *resp = *std::move(out);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* ctx,
                                           const v1::CancelJobRequest* req,
                                           v1::CancelJobResponse* resp) {
  TY_CHECK_CALLER(CheckClient);
  StatusOr<v1::Job> job = c_->Cancel(req->id(), req->checkpoint());
  if (!job.ok()) return rpc::ToGrpc(job.status());
  *resp->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* ctx,
                                          const v1::WatchJobRequest* req,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  TY_CHECK_CALLER(CheckClient);
  StatusOr<std::shared_ptr<Watcher>> watcher = c_->Watch(req->id());
  if (!watcher.ok()) return rpc::ToGrpc(watcher.status());
  v1::JobEvent event;
  while (!ctx->IsCancelled() && !stopping_->load()) {
    if ((*watcher)->Next(&event, 500ms)) {
      if (!writer->Write(event)) break;
    } else if ((*watcher)->ended()) {
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping");
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* ctx,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* resp) {
  TY_CHECK_CALLER(CheckClient);
  for (v1::WorkerInfo& w : c_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status WorkerService::RegisterWorker(grpc::ServerContext* ctx,
                                           const v1::RegisterWorkerRequest* req,
                                           v1::RegisterWorkerResponse* resp) {
  TY_CHECK_CALLER(CheckWorker);
  StatusOr<v1::RegisterWorkerResponse> out = c_->RegisterWorker(*req);
  if (!out.ok()) return rpc::ToGrpc(out.status());
  *resp = *std::move(out);
  return grpc::Status::OK;
}

// The first heartbeat names the worker; then one thread reads heartbeats while this one writes
// the commands the coordinator queues, until either side ends, the worker registers again (a
// newer stream takes over) or the server stops.
grpc::Status WorkerService::Heartbeat(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::WorkerCommand, v1::WorkerHeartbeat>* stream) {
  TY_CHECK_CALLER(CheckWorker);
  v1::WorkerHeartbeat first;
  if (!stream->Read(&first)) return grpc::Status::OK;
  Status s = ApplyHeartbeat(first);
  if (!s.ok()) return rpc::ToGrpc(s);
  StatusOr<int64_t> incarnation = c_->Incarnation(first.name());
  if (!incarnation.ok()) return rpc::ToGrpc(incarnation.status());
  std::atomic<bool> reader_done{false};
  std::thread reader([&] {
    v1::WorkerHeartbeat hb;
    while (stream->Read(&hb)) {
      if (hb.name() != first.name() || !ApplyHeartbeat(hb).ok()) break;
    }
    reader_done = true;
  });
  grpc::Status result = grpc::Status::OK;
  while (!reader_done && !ctx->IsCancelled() && !stopping_->load()) {
    StatusOr<std::vector<v1::WorkerCommand>> commands =
        c_->TakeCommands(first.name(), *incarnation, 200ms);
    if (!commands.ok()) {
      result = rpc::ToGrpc(commands.status());
      break;
    }
    bool ok = true;
    for (const v1::WorkerCommand& c : *commands) ok = ok && stream->Write(c);
    if (!ok) break;
  }
  ctx->TryCancel();  // unblocks the reader
  reader.join();
  return result;
}

Status WorkerService::ApplyHeartbeat(const v1::WorkerHeartbeat& hb) {
  Status s = c_->Heartbeat(hb);
  if (on_latency_ && hb.sent_unix_us() > 0) {
    const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    on_latency_(static_cast<double>(now - hb.sent_unix_us()) / 1e6);
  }
  return s;
}

grpc::Status WorkerService::ReportMetrics(grpc::ServerContext* ctx,
                                          grpc::ServerReader<v1::MetricsReport>* reader,
                                          v1::ReportMetricsResponse*) {
  TY_CHECK_CALLER(CheckWorker);
  v1::MetricsReport report;
  while (!stopping_->load() && reader->Read(&report)) {
    Status s = c_->ReportMetrics(report);
    if (!s.ok()) {
      TY_LOG(WARNING) << "metrics of job " << report.job_id() << ": " << s.message();
    }
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::StoreSet(grpc::ServerContext* ctx, const v1::StoreSetRequest* req,
                                     v1::StoreSetResponse*) {
  TY_CHECK_CALLER(CheckWorker);
  return rpc::ToGrpc(c_->rendezvous().Set(ScopeOf(req->scope()), req->key(), req->value()));
}

grpc::Status WorkerService::StoreGet(grpc::ServerContext* ctx, const v1::StoreGetRequest* req,
                                     v1::StoreGetResponse* resp) {
  TY_CHECK_CALLER(CheckWorker);
  StatusOr<std::string> v =
      c_->rendezvous().Get(ScopeOf(req->scope()), req->key(), StoreTimeout(req->timeout_ms()));
  if (!v.ok()) return rpc::ToGrpc(v.status());
  resp->set_value(*std::move(v));
  return grpc::Status::OK;
}

grpc::Status WorkerService::StoreWait(grpc::ServerContext* ctx, const v1::StoreWaitRequest* req,
                                      v1::StoreWaitResponse*) {
  TY_CHECK_CALLER(CheckWorker);
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  return rpc::ToGrpc(
      c_->rendezvous().Wait(ScopeOf(req->scope()), keys, StoreTimeout(req->timeout_ms())));
}

grpc::Status WorkerService::StoreAdd(grpc::ServerContext* ctx, const v1::StoreAddRequest* req,
                                     v1::StoreAddResponse* resp) {
  TY_CHECK_CALLER(CheckWorker);
  StatusOr<int64_t> v = c_->rendezvous().Add(ScopeOf(req->scope()), req->key(), req->delta());
  if (!v.ok()) return rpc::ToGrpc(v.status());
  resp->set_value(*v);
  return grpc::Status::OK;
}

}  // namespace trainyard::server
