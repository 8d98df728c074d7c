// Simulated workers for the control-plane benchmark (control_plane_bench.cc), on gRPC's
// callback API so that ten thousand of them cost the benchmark a few threads. Each registers,
// then heartbeats once a second on one stream (the beats spread over the second, as
// independent workers would be) and reads the commands sent back; when its stream or its
// registration fails (a coordinator restart) it registers again after the daemon's back-off
// (200 ms, doubling to 5 s: worker/daemon/daemon.cc) and opens a new stream.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "trainyard/v1/service.grpc.pb.h"

namespace trainyard::bench {

class SimWorker;

class SimFleet {
 public:
  // Worker i uses channels[i % channels.size()].
  SimFleet(const std::vector<std::shared_ptr<grpc::Channel>>& channels, int workers);
  ~SimFleet();  // Stop()

  // Starts registering every worker and the thread that paces the heartbeats.
  void Start();
  // Cancels every call and waits (up to 30 s) until each has ended.
  void Stop();

  // Workers that registered and then had a heartbeat written on their new stream since the
  // last NewEpoch() (or Start).
  int back() const { return back_.load(); }
  void NewEpoch();
  int64_t commands() const { return commands_.load(); }

  // For SimWorker.
  std::atomic<int> back_{0};
  std::atomic<int64_t> commands_{0};
  std::atomic<int> epoch_{0};
  std::atomic<int> calls_{0};  // registrations and streams not yet ended

 private:
  void Drive();

  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs_;
  std::vector<std::unique_ptr<SimWorker>> workers_;
  std::atomic<bool> stop_{false};
  std::thread driver_;
};

}  // namespace trainyard::bench
