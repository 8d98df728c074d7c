#include "worker/ranks/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace trainyard::ranks {
namespace {

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void CloseAll(std::initializer_list<int> fds) {
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

// In the child, after fork: async-signal-safe calls only. `report` and `err` are write ends
// and `command` a read end (-1: not captured), `devnull` is /dev/null for a discarded stdout
// (-1: inherited). Each is first copied above the fds it goes to, so none overwrites another.
[[noreturn]] void Exec(const char* path, char* const* argv, char* const* env, pid_t parent,
                       int report, int err, int command, int devnull) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
  auto high = [](int fd) { return fd >= 0 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 10) : -1; };
  report = high(report);
  err = high(err);
  command = high(command);
  devnull = high(devnull);
  // dup2 clears O_CLOEXEC on the copy: only these stay open across exec.
  if (report >= 0) ::dup2(report, kChildReportFd);
  if (command >= 0) ::dup2(command, kChildCommandFd);
  if (err >= 0) ::dup2(err, STDERR_FILENO);
  if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
  ::execve(path, argv, env);
  const char msg[] = "trainyard: error: cannot run the rank's program\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

StatusOr<std::unique_ptr<RankProcess>> RankProcess::Start(const ProcessOptions& o) {
  int report[2] = {-1, -1}, err[2] = {-1, -1}, command[2] = {-1, -1};
  if ((o.report_pipe && ::pipe2(report, O_CLOEXEC) != 0) ||
      (o.capture_stderr && ::pipe2(err, O_CLOEXEC) != 0) ||
      (o.command_pipe && ::pipe2(command, O_CLOEXEC) != 0)) {
    Status failed = ErrnoStatus("starting a rank (pipe)");
    CloseAll({report[0], report[1], err[0], err[1], command[0], command[1]});
    return failed;
  }
  if (command[1] >= 0) ::fcntl(command[1], F_SETFL, O_NONBLOCK);
  const int devnull = o.discard_stdout ? ::open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
  std::vector<std::string> argv = o.argv, env = o.env;
  std::vector<char*> argv_p = Pointers(argv), env_p = Pointers(env);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    Exec(o.program.c_str(), argv_p.data(), env_p.data(), parent, report[1], err[1], command[0],
         devnull);
  }
  const Status failed = pid < 0 ? ErrnoStatus("starting a rank (fork)") : OkStatus();
  CloseAll({report[1], err[1], command[0], devnull});
  if (!failed.ok()) {
    CloseAll({report[0], err[0], command[1]});
    return failed;
  }
  ::setpgid(pid, pid);  // as the child does: the group exists before anyone signals it
  std::unique_ptr<RankProcess> p(new RankProcess());
  p->pid_ = pid;
  p->report_fd_ = report[0];
  p->err_fd_ = err[0];
  p->command_fd_ = command[1];
  return p;
}

RankProcess::~RankProcess() {
  Signal(SIGKILL);
  // Bounded: a process stuck in the kernel (uninterruptible I/O) is left to init.
  for (int i = 0; i < 500 && !Reap(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CloseOutput();
  CloseAll({command_fd_});
}

bool RankProcess::SendCommand(const std::string& line) {
  if (command_fd_ < 0 || reaped()) return false;
  // A rank that exited before it was reaped would raise SIGPIPE in the writer.
  static const bool sigpipe_ignored = ::signal(SIGPIPE, SIG_IGN) != SIG_ERR;
  (void)sigpipe_ignored;
  const std::string text = line + "\n";  // far below PIPE_BUF: written whole or not at all
  return ::write(command_fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

void RankProcess::Signal(int sig) const {
  if (!reaped()) ::kill(-pid_, sig);
}

bool RankProcess::Reap() {
  if (reaped()) return true;
  int status = 0;
  const pid_t got = ::waitpid(pid_, &status, WNOHANG);
  if (got == 0 || (got < 0 && errno == EINTR)) return false;
  wait_status_ = got < 0 ? W_EXITCODE(1, 0) : status;  // < 0: cannot happen, only we reap it
  return true;
}

void RankProcess::CloseOutput() {
  CloseAll({err_fd_, report_fd_});
  err_fd_ = report_fd_ = -1;
}

void RankProcess::ReadStream(size_t index, Stream s, const LineFn& on_line) {
  int& fd = s == Stream::kReport ? report_fd_ : err_fd_;
  std::string& partial = s == Stream::kReport ? report_partial_ : err_partial_;
  char buf[16384];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n < 0 && errno == EINTR) return;
  if (n > 0) partial.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    on_line(index, s, partial.substr(start, nl - start));
  }
  partial.erase(0, start);
  if (n > 0) return;
  if (!partial.empty()) on_line(index, s, partial);
  partial.clear();
  ::close(fd);
  fd = -1;
}

void RankProcess::PollLines(const std::vector<RankProcess*>& processes,
                            std::chrono::milliseconds timeout, const LineFn& on_line) {
  std::vector<pollfd> fds;
  std::vector<std::pair<size_t, Stream>> owners;  // the index of each fd's process, its stream
  for (size_t i = 0; i < processes.size(); ++i) {
    const RankProcess& p = *processes[i];
    if (p.report_fd_ >= 0)
      fds.push_back({p.report_fd_, POLLIN, 0}), owners.push_back({i, Stream::kReport});
    if (p.err_fd_ >= 0)
      fds.push_back({p.err_fd_, POLLIN, 0}), owners.push_back({i, Stream::kStderr});
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);
    return;
  }
  if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const auto [index, stream] = owners[i];
    processes[index]->ReadStream(index, stream, on_line);
  }
}

}  // namespace trainyard::ranks
