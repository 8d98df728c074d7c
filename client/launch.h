// The local launcher behind `trainyard train SPEC --nproc N` (as `torchrun --standalone`): this
// process serves a TcpStore on loopback and starts N copies of this binary, one per rank, each
// told its place by the environment variables below; it forwards their output and signals and
// reports the first rank that fails. docs/design/005-job-spec-and-trainer.md, "Local launch".
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::client {

// What the launcher of `trainyard train --nproc` tells each rank (worker/daemon/rank.h names
// what the worker daemon tells its ranks).
inline constexpr const char* kRankEnv = "TRAINYARD_RANK";             // 0 .. world size - 1
inline constexpr const char* kWorldSizeEnv = "TRAINYARD_WORLD_SIZE";  // ranks in all
inline constexpr const char* kStoreEnv = "TRAINYARD_STORE";           // "host:port" of the store
inline constexpr const char* kRunIdEnv = "TRAINYARD_RUN_ID";          // scopes the store's keys

struct LaunchOptions {
  int nproc = 1;
  // Each rank's arguments after the program name ("train", SPEC, ...), without --nproc. Ranks
  // above 0 also get --quiet; their stdout is discarded and their stderr lines are prefixed
  // "[rank r] ". Rank 0 writes to this process's stdout and stderr as is.
  std::vector<std::string> args;
  // After a rank fails, or after this process is asked to stop, how long the other ranks get
  // to exit on their own before they are killed (the spec's collective timeout + 5 s).
  std::chrono::milliseconds grace = std::chrono::seconds(605);
  // The binary every rank runs.
  std::string program = "/proc/self/exe";
  bool quiet = false;  // no "launching N ranks" line
};

// Starts the store and the ranks and waits for all of them (every wait bounded by `grace`).
// Returns the exit code: 0 when every rank exits 0; else the first failing rank's code (1 when
// it was killed by a signal); 128 + signal when SIGINT or SIGTERM reached this process (they
// are forwarded to every rank as SIGTERM, and again on a second signal, which aborts them).
int Launch(const LaunchOptions& options);

// The variables above, read in a rank. nullopt when TRAINYARD_RANK is unset (not launched);
// InvalidArgument naming the variable and its value when one is missing or malformed.
struct RankEnv {
  int rank = 0;
  int world_size = 1;
  std::string store;   // "host:port"
  std::string run_id;  // [0-9A-Za-z_-]+
};
StatusOr<std::optional<RankEnv>> ReadRankEnv();

}  // namespace trainyard::client
