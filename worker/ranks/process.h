// RankProcess: one rank's process, as both launchers start and watch it (`trainyard train
// --nproc`, client/launch.h; the worker daemon, worker/daemon/rank_supervisor.h).
//
// The child is made the leader of its own process group (signals go to the group, so
// whatever the rank started goes too, and a terminal's Ctrl-C reaches only the launcher) and
// dies with the thread that started it (PR_SET_PDEATHSIG): a launcher killed with SIGKILL
// leaves no orphans, so that thread must outlive the process. Its stderr and report pipe, when
// captured, are read line by line by PollLines. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::ranks {

// fd 3 in the child: the report pipe's write end (its number is passed as kReportFdEnv).
inline constexpr int kChildReportFd = 3;
// fd 4 in the child: the command pipe's read end (its number is passed as kCommandFdEnv).
inline constexpr int kChildCommandFd = 4;

struct ProcessOptions {
  std::string program;            // executed as is (no PATH search)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the whole environment (RankEnvironment, env.h)
  bool discard_stdout = false;    // else inherited
  bool capture_stderr = false;    // else inherited
  bool report_pipe = false;       // a pipe on the child's kChildReportFd
  bool command_pipe = false;      // a pipe on the child's kChildCommandFd (SendCommand)
};

class RankProcess {
 public:
  enum class Stream { kStderr, kReport };

  // Forks and execs. Only async-signal-safe calls run in the child after fork (other threads
  // may hold locks); a program that cannot be run exits 127 saying so on its stderr.
  static StatusOr<std::unique_ptr<RankProcess>> Start(const ProcessOptions& options);
  // SIGKILLs the group and reaps the process when it has not been reaped (waiting up to 5 s);
  // closes the pipes.
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` to the process group (while the process has not been reaped).
  void Signal(int sig) const;
  // Reaps the process if it exited, without blocking: true once it has been reaped, with its
  // wait status in wait_status().
  bool Reap();
  bool reaped() const { return wait_status_ >= 0; }
  int wait_status() const { return wait_status_; }
  // Whether a captured stream is still open (its last lines may still come).
  bool output_open() const { return err_fd_ >= 0 || report_fd_ >= 0; }
  void CloseOutput();
  // Writes `line` and a newline to the command pipe without blocking: false when there is no
  // pipe, the rank is gone or the pipe is full (the rank does not read). The first call makes
  // the process ignore SIGPIPE (a rank may exit before it is reaped).
  bool SendCommand(const std::string& line);

  // Waits up to `timeout` for output from any of `processes` (sleeping when none has a stream
  // open) and passes each whole line to on_line with the index of its process in `processes`;
  // at a stream's end its unterminated rest, and the stream is closed.
  using LineFn = std::function<void(size_t index, Stream s, const std::string& line)>;
  static void PollLines(const std::vector<RankProcess*>& processes,
                        std::chrono::milliseconds timeout, const LineFn& on_line);

 private:
  RankProcess() = default;
  // Reads what stream `s` has; passes whole lines on as process `index`'s (all the rest at
  // EOF) and closes it at EOF.
  void ReadStream(size_t index, Stream s, const LineFn& on_line);

  pid_t pid_ = -1;
  int wait_status_ = -1;
  int err_fd_ = -1, report_fd_ = -1;  // read ends; -1 when not captured or closed
  int command_fd_ = -1;               // the command pipe's write end (non-blocking); -1: none
  std::string err_partial_, report_partial_;
};

}  // namespace trainyard::ranks
