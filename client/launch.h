// The local launcher behind `trainyard train SPEC --nproc N` (as `torchrun --standalone`): this
// process serves the rendezvous store over TCP on loopback and starts N copies of this binary,
// one per rank (worker/ranks/process.h, as the worker daemon does), each told its place by the
// environment (worker/ranks/env.h: TRAINYARD_RANK, _WORLD_SIZE, _STORE, _RUN_ID); it forwards
// their output and signals and reports the first rank that fails.
// docs/design/005-job-spec-and-trainer.md, "Local launch".
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace trainyard::client {

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

}  // namespace trainyard::client
