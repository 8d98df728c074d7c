// The coordinator's streaming calls on gRPC's callback API: a worker's heartbeats and the
// commands sent back (Worker.Heartbeat), a watcher's events (Coordinator.WatchJob) and a
// worker's metrics (Worker.ReportMetrics). Each stream is a reactor that reacts to a read, a
// write or a wake of the Coordinator, so no thread is held per stream: ten thousand workers
// cost the server a few threads, not twenty thousand. The reactors check the caller exactly
// as the synchronous handlers do (grpc_services.cc) and only translate to Coordinator calls.
// Note [Reactor locks]: a reactor's own mutex is taken under the Coordinator's lock (by a
// wake) and never held while calling the Coordinator; gRPC runs reactions on its own threads,
// never inside StartWrite or Finish.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "server/auth.h"
#include "server/coordinator.h"
#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard::server {

// A live stream, which the server can end when it stops.
class Stream {
 public:
  virtual ~Stream() = default;
  // Ends the call (the coordinator is stopping) unless it ended already; returns at once.
  virtual void Stop() = 0;
};

// The live streams of a service. StopAll ends them and makes Add refuse new ones: the server
// stops its streams at once instead of waiting for its shutdown deadline. Thread-safe.
class Streams {
 public:
  bool Add(Stream* s);  // false once stopped: the caller ends its call at once
  void Remove(Stream* s);
  void StopAll();

 private:
  std::mutex mu_;
  std::set<Stream*> live_;
  bool stopped_ = false;
};

// One thread that runs what is posted, in order: a Coordinator commands wake runs under the
// Coordinator's lock and may not take the commands itself, so it posts the take here.
class Pump {
 public:
  Pump();
  ~Pump();  // runs what was posted, then joins
  void Post(std::function<void()> f);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool done_ = false;
  std::thread thread_;
};

// What a stream needs; everything must outlive the server's calls.
struct StreamEnv {
  Coordinator* coordinator;
  const Authenticator* auth;
  Streams* streams;
  Pump* pump;  // heartbeats only
  // May be empty: gets, for each heartbeat that says when it was sent, the seconds from
  // sending to applied.
  const std::function<void(double)>* on_heartbeat_latency;
};

grpc::ServerBidiReactor<trainyard::v1::WorkerHeartbeat, trainyard::v1::WorkerCommand>*
NewHeartbeatStream(const StreamEnv& env, grpc::CallbackServerContext* ctx);

grpc::ServerWriteReactor<trainyard::v1::JobEvent>* NewWatchStream(
    const StreamEnv& env, grpc::CallbackServerContext* ctx,
    const trainyard::v1::WatchJobRequest* req);

// Refused reports (a stale attempt's, FailedPrecondition) are listed in `resp` (AddRefusal in
// coordinator.h), which the worker reads when the stream ends.
grpc::ServerReadReactor<trainyard::v1::MetricsReport>* NewMetricsStream(
    const StreamEnv& env, grpc::CallbackServerContext* ctx,
    trainyard::v1::ReportMetricsResponse* resp);

}  // namespace trainyard::server
