// A rank process, as the worker daemon starts it (`trainyard-worker rank`): it reads its place
// from the environment below, rendezvouses through the coordinator (GrpcStore), trains with
// the Trainer, and writes one JSON line per event to the report pipe the daemon reads:
//   {"type":"status","step":..,"phase":..,"phase_age_ms":..,"issued":..,"done":..,
//    "collective_age_ms":..}            every half second, from its own thread
//   {"type":"step", <StepMetrics fields>}   after each step
//   {"type":"eval", ...} {"type":"checkpoint","dir":..}
// Exit codes: 0 done, 1 failed (worth a restart), 2 the job itself is wrong (its spec or
// data; a restart cannot help), 143 stopped by SIGTERM (after a checkpoint when configured).
#pragma once

namespace trainyard::daemon {

// The environment a rank reads (set by RankSupervisor).
inline constexpr const char* kCoordinatorEnv = "TRAINYARD_COORDINATOR";  // host:port
inline constexpr const char* kJobEnv = "TRAINYARD_JOB_ID";
inline constexpr const char* kJobUidEnv = "TRAINYARD_JOB_UID";  // Job.uid (Note [Run identity])
inline constexpr const char* kAttemptEnv = "TRAINYARD_ATTEMPT";
inline constexpr const char* kSecretEnv = "TRAINYARD_SECRET";
inline constexpr const char* kRankEnv = "TRAINYARD_RANK";
inline constexpr const char* kWorldSizeEnv = "TRAINYARD_WORLD_SIZE";
inline constexpr const char* kSpecEnv = "TRAINYARD_SPEC";           // path of the spec JSON
inline constexpr const char* kReportFdEnv = "TRAINYARD_REPORT_FD";  // the report pipe's fd
inline constexpr const char* kHostEnv = "TRAINYARD_HOST";           // address Gloo listens on
// The worker's slot the rank runs in: for a cuda job the GPU it sees (as its only device,
// through CUDA_VISIBLE_DEVICES, before CUDA starts).
inline constexpr const char* kSlotEnv = "TRAINYARD_SLOT";
inline constexpr const char* kTokenEnv = "TRAINYARD_TOKEN";
inline constexpr const char* kCaEnv = "TRAINYARD_CA_CERT";
inline constexpr const char* kCertEnv = "TRAINYARD_CERT";
inline constexpr const char* kKeyEnv = "TRAINYARD_KEY";
inline constexpr const char* kServerNameEnv = "TRAINYARD_TLS_SERVER_NAME";

// Runs the rank and returns its exit code.
int RunRank();

}  // namespace trainyard::daemon
