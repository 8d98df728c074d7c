// The environment a rank process reads, in one place for both launchers: `trainyard train
// --nproc` (client/launch.h) and the worker daemon (worker/daemon/rank_supervisor.h). Every
// rank gets its place (rank, world size); a local rank finds the launcher's store by
// kStoreEnv and kRunIdEnv, a daemon's rank finds the coordinator and its job attempt by the
// rest.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::ranks {

// Every rank.
inline constexpr const char* kRankEnv = "TRAINYARD_RANK";             // 0 .. world size - 1
inline constexpr const char* kWorldSizeEnv = "TRAINYARD_WORLD_SIZE";  // ranks in all
// A rank of `trainyard train --nproc`.
inline constexpr const char* kStoreEnv = "TRAINYARD_STORE";   // "host:port" of the store
inline constexpr const char* kRunIdEnv = "TRAINYARD_RUN_ID";  // scopes the store's keys
// A rank of the worker daemon (`trainyard-worker rank`).
inline constexpr const char* kCoordinatorEnv = "TRAINYARD_COORDINATOR";  // host:port
inline constexpr const char* kJobEnv = "TRAINYARD_JOB_ID";
inline constexpr const char* kJobUidEnv = "TRAINYARD_JOB_UID";  // Job.uid (Note [Run identity])
inline constexpr const char* kAttemptEnv = "TRAINYARD_ATTEMPT";
inline constexpr const char* kSecretEnv = "TRAINYARD_SECRET";
inline constexpr const char* kSpecEnv = "TRAINYARD_SPEC";           // path of the spec JSON
inline constexpr const char* kReportFdEnv = "TRAINYARD_REPORT_FD";  // the report pipe's fd
// The read end of the daemon's command pipe: one JSON line per Regroup for this rank
// (rank.h). Unset: no commands (a rank of a job that is not elastic).
inline constexpr const char* kCommandFdEnv = "TRAINYARD_COMMAND_FD";
inline constexpr const char* kHostEnv = "TRAINYARD_HOST";  // address Gloo listens on
// The worker's slot the rank runs in: for a cuda job the GPU it sees (as its only device,
// through CUDA_VISIBLE_DEVICES, before CUDA starts).
inline constexpr const char* kSlotEnv = "TRAINYARD_SLOT";
inline constexpr const char* kTokenEnv = "TRAINYARD_TOKEN";
inline constexpr const char* kCaEnv = "TRAINYARD_CA_CERT";
inline constexpr const char* kCertEnv = "TRAINYARD_CERT";
inline constexpr const char* kKeyEnv = "TRAINYARD_KEY";
inline constexpr const char* kServerNameEnv = "TRAINYARD_TLS_SERVER_NAME";

// The integer variable `name` in [lo, hi]. InvalidArgument "NAME is not set" + `unset`, or
// "NAME = "v": must be an integer in [lo, hi]" + `malformed` (say where the bounds come from,
// or who sets the variable).
StatusOr<int> IntEnv(const char* name, int lo, int hi, const std::string& malformed,
                     const std::string& unset);

// This process's environment, without the variables `drop` names, then `extra`; with
// TY_NUM_THREADS=threads added when it is not set and threads > 0 (ranks share the cores).
std::vector<std::string> RankEnvironment(const std::function<bool(const std::string&)>& drop,
                                         const std::vector<std::string>& extra, int threads);

// With `interface` (the worker's --interface) non-empty: "NCCL_SOCKET_IFNAME=<interface>" and
// "GLOO_SOCKET_IFNAME=<interface>" for those of the two this process's environment does not
// set (an operator's own choice wins), so NCCL's bootstrap and sockets use the interface the
// worker advertises; nothing otherwise.
std::vector<std::string> SocketInterfaceEnv(const std::string& interface);

// The place of a rank of `trainyard train --nproc`. nullopt when TRAINYARD_RANK is unset (not
// launched); InvalidArgument naming the variable and its value when one is missing or
// malformed.
struct LocalRankEnv {
  int rank = 0;
  int world_size = 1;
  std::string store;   // "host:port"
  std::string run_id;  // [0-9A-Za-z_-]+
};
StatusOr<std::optional<LocalRankEnv>> ReadLocalRankEnv();

}  // namespace trainyard::ranks
