// The coordinator's gRPC services: thin adapters that check the caller, translate a request
// into a call on Coordinator, and its result back (STYLE.md habit 3). Synchronous API: each
// streaming call (a worker's heartbeats, a watcher) holds one thread of the server's pool.
#pragma once

#include <atomic>
#include <functional>
#include <set>
#include <string>

#include "server/coordinator.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard::server {

// Who may call. With tokens, every Coordinator call needs "authorization: Bearer <token>"
// with one of them, or a verified client certificate; with mtls, every Worker call needs a
// verified client certificate (else, with tokens, a token).
struct AuthPolicy {
  std::set<std::string> tokens;
  bool mtls = false;
};

class CoordinatorService final : public trainyard::v1::Coordinator::Service {
 public:
  CoordinatorService(Coordinator* c, AuthPolicy auth, const std::atomic<bool>* stopping)
      : c_(c), auth_(std::move(auth)), stopping_(stopping) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const trainyard::v1::SubmitJobRequest* req,
                         trainyard::v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const trainyard::v1::GetJobRequest* req,
                      trainyard::v1::GetJobResponse* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const trainyard::v1::ListJobsRequest* req,
                        trainyard::v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const trainyard::v1::CancelJobRequest* req,
                         trainyard::v1::CancelJobResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const trainyard::v1::WatchJobRequest* req,
                        grpc::ServerWriter<trainyard::v1::JobEvent>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const trainyard::v1::ListWorkersRequest* req,
                           trainyard::v1::ListWorkersResponse* resp) override;

 private:
  Coordinator* c_;
  AuthPolicy auth_;
  const std::atomic<bool>* stopping_;
};

class WorkerService final : public trainyard::v1::Worker::Service {
 public:
  // `on_heartbeat_latency` (may be empty) gets, for each heartbeat that says when it was sent,
  // the seconds from sending to applied.
  WorkerService(Coordinator* c, AuthPolicy auth, const std::atomic<bool>* stopping,
                std::function<void(double)> on_heartbeat_latency = {})
      : c_(c),
        auth_(std::move(auth)),
        stopping_(stopping),
        on_latency_(std::move(on_heartbeat_latency)) {}

  grpc::Status RegisterWorker(grpc::ServerContext* ctx,
                              const trainyard::v1::RegisterWorkerRequest* req,
                              trainyard::v1::RegisterWorkerResponse* resp) override;
  grpc::Status Heartbeat(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<trainyard::v1::WorkerCommand, trainyard::v1::WorkerHeartbeat>*
          stream) override;
  grpc::Status ReportMetrics(grpc::ServerContext* ctx,
                             grpc::ServerReader<trainyard::v1::MetricsReport>* reader,
                             trainyard::v1::ReportMetricsResponse* resp) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const trainyard::v1::StoreSetRequest* req,
                        trainyard::v1::StoreSetResponse* resp) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const trainyard::v1::StoreGetRequest* req,
                        trainyard::v1::StoreGetResponse* resp) override;
  grpc::Status StoreWait(grpc::ServerContext* ctx, const trainyard::v1::StoreWaitRequest* req,
                         trainyard::v1::StoreWaitResponse* resp) override;
  grpc::Status StoreAdd(grpc::ServerContext* ctx, const trainyard::v1::StoreAddRequest* req,
                        trainyard::v1::StoreAddResponse* resp) override;

 private:
  Status ApplyHeartbeat(const trainyard::v1::WorkerHeartbeat& hb);

  Coordinator* c_;
  AuthPolicy auth_;
  const std::atomic<bool>* stopping_;
  std::function<void(double)> on_latency_;
};

}  // namespace trainyard::server
