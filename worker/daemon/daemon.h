// The worker daemon (trainyard-worker): registers this node's capacity with the coordinator,
// heartbeats with the state of its ranks, runs the assignments it receives as rank processes
// (RankSupervisor), forwards the ranks' metrics (ReportMetrics) and serves /metrics for
// Prometheus. A lost connection is retried (re-registering with the ranks still running, which
// is how a restarted coordinator learns them); SIGTERM stops the ranks and the daemon.
// Fencing: a worker that hears nothing from the coordinator (no command, no heartbeat ack) for
// longer than its lease stops all its ranks (lease.h), and logs "lost the coordinator for
// 8.2 s (lease 7.5 s): stopping job J attempt N ranks 0, 1"; it keeps re-registering, and
// reports them as exited once back. Reports the coordinator refused (a stale attempt's) are
// logged once each: "the coordinator refused metrics: <why>".
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "proto/rpc.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::daemon {

struct DaemonOptions {
  std::string coordinator = "127.0.0.1:7600";
  rpc::ChannelOptions channel;
  std::string token;
  std::string name;         // unique among workers; default: the host name
  std::string host;         // the address peers reach this node's ranks at (as registered)
  std::string listen_host;  // `host` as a numeric address, which ranks' Gloo listens on
  std::string interface;    // --interface: ranks' NCCL_/GLOO_SOCKET_IFNAME unless set; "": none
  int cpu_slots = 1;
  int64_t memory_bytes = 0;  // what its CPU ranks may use in all; 0: unknown (not checked)
  std::vector<trainyard::v1::Gpu> gpus;  // GPU slots (DiscoverGpus, gpus.h)
  std::string metrics_listen = "127.0.0.1:9601";
  std::string work_dir = "trainyard-worker";
  std::chrono::milliseconds grace{10000};  // SIGTERM to SIGKILL when stopping ranks
  int threads_per_rank = 0;                // 0: cores / cpu_slots
  std::string ready_file;                  // written with the metrics address once registered
  // Replaces the lease the coordinator gives (RegisterWorkerResponse.lease_ms) when > 0.
  std::chrono::milliseconds lease{0};
};

// Runs until `stop` (then stops every rank, with a checkpoint) and returns the exit code.
int RunDaemon(const DaemonOptions& options, const std::atomic<bool>* stop);

}  // namespace trainyard::daemon
