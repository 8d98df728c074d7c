// RankSupervisor: the worker daemon's rank processes. It starts one `trainyard-worker rank`
// per assigned slot (rank.h) as a RankProcess (worker/ranks/process.h, what `trainyard train
// --nproc` starts too), reads each one's report pipe and the tail of its stderr, reaps its
// exit, and stops ranks on request: SIGTERM (the rank checkpoints at a step all ranks agree
// on and exits) and SIGKILL after the grace period, or SIGKILL at once. An elastic job's ranks
// regroup (Regroup): the supervisor rekeys them to their new attempt and rank and tells each
// through its command pipe (kCommandFdEnv).
//
// Every process is forked from the thread that calls Poll(), which must live as long as the
// supervisor: ranks die with that thread (PR_SET_PDEATHSIG), so a daemon killed with SIGKILL
// leaves no orphans. Not thread-safe: one thread calls everything.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "trainyard/v1/service.pb.h"
#include "worker/ranks/process.h"

namespace trainyard::daemon {

struct SupervisorOptions {
  std::string program = "/proc/self/exe";  // run as `program rank`
  std::string work_dir;                    // specs go to <work_dir>/<job>/<attempt>/spec.json
  std::chrono::milliseconds grace{10000};  // SIGTERM to SIGKILL
  int threads_per_rank = 0;                // TY_NUM_THREADS of each rank; 0: cores / slots
  // Added to every rank's environment (the coordinator, TLS files, token, host).
  std::vector<std::string> env;
  // Called for every report line but "status" (steps, evals, checkpoints).
  std::function<void(const trainyard::v1::RankStatus& who, const Json& line)> on_report;
};

class RankSupervisor {
 public:
  explicit RankSupervisor(SupervisorOptions options) : options_(std::move(options)) {}
  ~RankSupervisor();  // kills every rank still running

  // Starts the assignment's ranks. Ignores ranks already started (a repeated assignment).
  Status Start(const trainyard::v1::Assignment& a);
  // Stops the attempt's ranks (every attempt of the job when attempt is 0).
  void Stop(const std::string& job_id, int attempt, bool checkpoint);
  void StopAll(bool checkpoint);
  // The ranks of (job, from_attempt) listed in `g` continue as ranks of g.attempt: each is
  // rekeyed (its status too) and gets one line on its command pipe,
  //   {"type":"regroup","attempt":A,"secret":S,"rank":R,"world_size":M,"at_step_boundary":B}
  // (an exited one is rekeyed too: its exit is then the new attempt's news). Those not listed
  // are killed (SIGKILL). A repeated command finds nothing left to do.
  void Regroup(const trainyard::v1::Regroup& g);
  // Reads reports, reaps exits and escalates stops; waits up to `timeout` for output.
  void Poll(std::chrono::milliseconds timeout);

  // Every rank running, and those that exited in the last 10 minutes.
  std::vector<trainyard::v1::RankStatus> Statuses() const;
  int running() const;

 private:
  struct Rank {
    trainyard::v1::RankStatus status;
    std::unique_ptr<ranks::RankProcess> process;
    std::deque<std::string> err_tail;  // the last lines of stderr
    std::chrono::steady_clock::time_point last_report, phase_since, collective_since, exited_at;
    std::chrono::steady_clock::time_point kill_at{};  // SIGKILL then, when stopping
    bool killed = false;
    std::chrono::steady_clock::time_point reaped_at{};
  };
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank

  Status Spawn(const trainyard::v1::Assignment& a, const trainyard::v1::RankPlacement& p,
               const std::string& spec_path);
  void OnReport(Rank& r, const std::string& line);
  void OnStderr(Rank& r, const std::string& line);
  // Counts the exit of a reaped rank whose pipes are drained.
  void Exited(Rank& r, std::chrono::steady_clock::time_point now);
  void Reap();

  SupervisorOptions options_;
  std::map<Key, Rank> ranks_;
};

}  // namespace trainyard::daemon
