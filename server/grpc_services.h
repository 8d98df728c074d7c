// The coordinator's gRPC services: thin adapters that check the caller, translate a request
// into a call on Coordinator, and its result back (STYLE.md habit 3). The unary calls use the
// synchronous API (a pool thread while they run; the store waits block); the streaming calls
// (a worker's heartbeats and metrics, a watcher) the callback API, as reactors that hold no
// thread (grpc_streams.h).
#pragma once

#include <functional>
#include <string>

#include "server/auth.h"
#include "server/coordinator.h"
#include "server/grpc_streams.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard::server {

// Every call is checked by the Authenticator (auth.h) first: Coordinator calls need the
// client role, Worker calls the worker role, and a worker acts only under the names its
// credential is bound to. `auth` must outlive the services. Stop() ends every stream at once
// (the server is stopping) and refuses new ones.
class CoordinatorService final : public trainyard::v1::Coordinator::WithCallbackMethod_WatchJob<
                                     trainyard::v1::Coordinator::Service> {
 public:
  CoordinatorService(Coordinator* c, const Authenticator* auth) : c_(c), auth_(auth) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const trainyard::v1::SubmitJobRequest* req,
                         trainyard::v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const trainyard::v1::GetJobRequest* req,
                      trainyard::v1::GetJobResponse* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const trainyard::v1::ListJobsRequest* req,
                        trainyard::v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const trainyard::v1::CancelJobRequest* req,
                         trainyard::v1::CancelJobResponse* resp) override;
  grpc::ServerWriteReactor<trainyard::v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* ctx, const trainyard::v1::WatchJobRequest* req) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const trainyard::v1::ListWorkersRequest* req,
                           trainyard::v1::ListWorkersResponse* resp) override;

  void Stop() { streams_.StopAll(); }

 private:
  Coordinator* c_;
  const Authenticator* auth_;
  Streams streams_;
};

// The spec of a SubmitJob request as JSON text: spec_json as it is, or the JobSpec message in
// its proto3 JSON mapping (field names as in the .proto). Fields of the message that this
// coordinator does not know become members "#<number>", which validation reports as unknown.
StatusOr<std::string> SpecJsonOf(const trainyard::v1::SubmitJobRequest& req);

class WorkerService final
    : public trainyard::v1::Worker::WithCallbackMethod_Heartbeat<
          trainyard::v1::Worker::WithCallbackMethod_ReportMetrics<trainyard::v1::Worker::Service>> {
 public:
  // `on_heartbeat_latency` (may be empty) gets, for each heartbeat that says when it was sent,
  // the seconds from sending to applied.
  WorkerService(Coordinator* c, const Authenticator* auth,
                std::function<void(double)> on_heartbeat_latency = {})
      : c_(c), auth_(auth), on_latency_(std::move(on_heartbeat_latency)) {}

  grpc::Status RegisterWorker(grpc::ServerContext* ctx,
                              const trainyard::v1::RegisterWorkerRequest* req,
                              trainyard::v1::RegisterWorkerResponse* resp) override;
  grpc::ServerBidiReactor<trainyard::v1::WorkerHeartbeat, trainyard::v1::WorkerCommand>* Heartbeat(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerReadReactor<trainyard::v1::MetricsReport>* ReportMetrics(
      grpc::CallbackServerContext* ctx, trainyard::v1::ReportMetricsResponse* resp) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const trainyard::v1::StoreSetRequest* req,
                        trainyard::v1::StoreSetResponse* resp) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const trainyard::v1::StoreGetRequest* req,
                        trainyard::v1::StoreGetResponse* resp) override;
  grpc::Status StoreWait(grpc::ServerContext* ctx, const trainyard::v1::StoreWaitRequest* req,
                         trainyard::v1::StoreWaitResponse* resp) override;
  grpc::Status StoreAdd(grpc::ServerContext* ctx, const trainyard::v1::StoreAddRequest* req,
                        trainyard::v1::StoreAddResponse* resp) override;

  void Stop() { streams_.StopAll(); }

 private:
  StreamEnv Env() { return {c_, auth_, &streams_, &pump_, &on_latency_}; }

  Coordinator* c_;
  const Authenticator* auth_;
  std::function<void(double)> on_latency_;
  Streams streams_;
  Pump pump_;  // after streams_: destroyed first, running the takes still posted
};

}  // namespace trainyard::server
