// The C++ client of the coordinator's Coordinator service: what the CLI's submit, list,
// describe, watch, cancel and local commands are made of, and what a program can use itself.
// Every unary call has a deadline; Watch reconnects across a coordinator restart.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/rpc.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard::client {

namespace v1 = ::trainyard::v1;

struct ConnectOptions : rpc::CallerOptions {   // where and how, and:
  std::chrono::milliseconds deadline{30000};   // of each unary call
  std::chrono::milliseconds watch_retry{500};  // Watch's wait before it reconnects
};

// Ends a Watch from another thread: Stop() cancels its call, or the wait before a retry, and
// the Watch returns Cancelled. One per Watch; a Watch given a stopped one returns at once.
class WatchStop {
 public:
  void Stop();

 private:
  friend class ServiceClient;
  // Registers the Watch's current call; false when already stopped.
  bool Begin(grpc::ClientContext* call);
  void End();
  bool stopped();
  // Waits up to `d` or until Stop(); true when stopped.
  bool WaitFor(std::chrono::milliseconds d);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  grpc::ClientContext* call_ = nullptr;
};

class ServiceClient {
 public:
  // InvalidArgument when the transport policy refuses the address (rpc::MakeChannel).
  static StatusOr<std::unique_ptr<ServiceClient>> Connect(const ConnectOptions& options);

  StatusOr<v1::Job> Submit(const std::string& spec_json);
  StatusOr<v1::Job> GetJob(const std::string& id);
  StatusOr<v1::ListJobsResponse> ListJobs(const std::vector<v1::JobState>& states,
                                          int page_size = 0, const std::string& page_token = "");
  StatusOr<v1::Job> Cancel(const std::string& id, bool checkpoint);
  StatusOr<std::vector<v1::WorkerInfo>> ListWorkers();

  // Calls `on_event` with every event of the job (the current state first) until the job
  // ends (OkStatus), `on_event` returns false or `stop` is stopped (Cancelled). While the
  // coordinator cannot be reached it retries, for up to `unavailable_for` in a row (then
  // Unavailable); a reconnect asks for the stored events after the last one seen
  // (WatchJobRequest.from_seq), so none is lost or repeated across it.
  Status Watch(const std::string& id, const std::function<bool(const v1::JobEvent&)>& on_event,
               std::chrono::milliseconds unavailable_for = std::chrono::seconds(60),
               WatchStop* stop = nullptr);

  const ConnectOptions& options() const { return options_; }

 private:
  ServiceClient(ConnectOptions options, std::shared_ptr<grpc::Channel> channel);
  void Prepare(grpc::ClientContext* ctx) const;
  // A unary call, naming the coordinator in its error.
  Status Named(const grpc::Status& s) const;

  ConnectOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

// "FAILED" for v1::FAILED, ...; "UNSPECIFIED" otherwise. And back (case-insensitive).
std::string StateName(v1::JobState state);
StatusOr<v1::JobState> ParseState(const std::string& name);

}  // namespace trainyard::client
