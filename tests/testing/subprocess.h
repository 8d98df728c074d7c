// Runs a real process for end-to-end tests: argv in, exit status and captured output out, with
// a deadline after which the process is killed (a test never hangs on a child).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace trainyard::testing {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal when killed by one
  bool timed_out = false;
  std::string out, err;
};

// A started child with its stdout and stderr on pipes.
class Subprocess {
 public:
  explicit Subprocess(const std::vector<std::string>& argv) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Subprocess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  void Signal(int sig) { ::kill(pid_, sig); }

  // Reads output until stderr holds `text` (true) or the deadline passes or both pipes close.
  bool WaitForStderr(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (result_.err.find(text) == std::string::npos) {
      if (!Pump(deadline)) return result_.err.find(text) != std::string::npos;
    }
    return true;
  }

  // Reads everything until both pipes close, then reaps the child; kills it at the deadline.
  ProcessResult Wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Pump(deadline)) {
    }
    if (std::chrono::steady_clock::now() >= deadline && (out_fd_ >= 0 || err_fd_ >= 0)) {
      result_.timed_out = true;
      ::kill(pid_, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result_;
  }

 private:
  // One poll round; false when both pipes are closed or the deadline passed.
  bool Pump(std::chrono::steady_clock::time_point deadline) {
    if (out_fd_ < 0 && err_fd_ < 0) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) return true;
    Drain(fds[0], &out_fd_, &result_.out);
    Drain(fds[1], &err_fd_, &result_.err);
    return true;
  }
  static void Drain(const pollfd& p, int* fd, std::string* into) {
    if (*fd < 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR))) return;
    char buf[4096];
    const ssize_t n = ::read(*fd, buf, sizeof(buf));
    if (n > 0) {
      into->append(buf, static_cast<size_t>(n));
    } else {
      ::close(*fd);
      *fd = -1;
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool reaped_ = false;
  ProcessResult result_;
};

// Runs argv to completion (killed after `timeout`).
inline ProcessResult RunProcess(const std::vector<std::string>& argv,
                                std::chrono::milliseconds timeout) {
  Subprocess p(argv);
  return p.Wait(timeout);
}

}  // namespace trainyard::testing
