#include "client/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/random_id.h"
#include "common/signals.h"
#include "worker/dist/store.h"

extern char** environ;

namespace trainyard::client {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::atomic<int> g_signals{0};  // SIGINT / SIGTERM received by the launcher
std::atomic<int> g_first_signal{0};

void OnSignal(int sig) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  g_signals.fetch_add(1);
}

// One rank as the launcher sees it.
struct Child {
  int rank = 0;
  pid_t pid = -1;
  int err_fd = -1;      // ranks > 0: the read end of their stderr; -1 once closed
  std::string partial;  // the start of a line not yet ended
  bool running = false;
  bool killed = false;  // by the launcher, after the grace period
};

// The launcher's own messages, and forwarded lines, each in one write.
void Say(const std::string& line) {
  std::string text = line + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

constexpr int kMaxRanks = 4096;  // parallelism.world_size's bound

Status MissingEnv(const char* name) {
  return InvalidArgumentError(std::string(name) + " is not set: a rank needs " + kRankEnv + ", " +
                              kWorldSizeEnv + ", " + kStoreEnv + " and " + kRunIdEnv +
                              " (trainyard train --nproc sets them)");
}

// This process's environment without the launcher's variables, plus `rank`'s. Ranks share
// the cores: without TY_NUM_THREADS each gets cores / nproc kernel threads (at least 1).
std::vector<std::string> ChildEnv(const LaunchOptions& o, int rank, const std::string& store,
                                  const std::string& run_id) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (name != kRankEnv && name != kWorldSizeEnv && name != kStoreEnv && name != kRunIdEnv) {
      env.push_back(entry);
    }
  }
  env.push_back(std::string(kRankEnv) + "=" + std::to_string(rank));
  env.push_back(std::string(kWorldSizeEnv) + "=" + std::to_string(o.nproc));
  env.push_back(std::string(kStoreEnv) + "=" + store);
  env.push_back(std::string(kRunIdEnv) + "=" + run_id);
  if (std::getenv("TY_NUM_THREADS") == nullptr) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    env.push_back("TY_NUM_THREADS=" + std::to_string(std::max(1, cores / o.nproc)));
  }
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Forks and execs one rank. stdout_fd / stderr_fd replace the child's (-1: inherited). The
// child gets its own process group, so a terminal's Ctrl-C reaches only the launcher (which
// forwards it once), and dies with the launcher. Only async-signal-safe calls after fork: the
// store server's thread may hold locks.
StatusOr<pid_t> Spawn(const std::string& program, std::vector<std::string> argv,
                      std::vector<std::string> env, int stdout_fd, int stderr_fd) {
  std::vector<char*> argv_p = Pointers(argv), env_p = Pointers(env);
  const char* path = program.c_str();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("starting a rank (fork)");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    if (stdout_fd >= 0) ::dup2(stdout_fd, STDOUT_FILENO);
    if (stderr_fd >= 0) ::dup2(stderr_fd, STDERR_FILENO);
    ::execve(path, argv_p.data(), env_p.data());
    const char msg[] = "trainyard: error: cannot run the rank's program\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    ::_exit(127);
  }
  return pid;
}

Status StartChild(const LaunchOptions& o, const std::string& store, const std::string& run_id,
                  int devnull, Child* child) {
  std::vector<std::string> argv = {"trainyard"};
  argv.insert(argv.end(), o.args.begin(), o.args.end());
  int pipe_fds[2] = {-1, -1};
  if (child->rank > 0) {
    argv.push_back("--quiet");
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoStatus("starting a rank (pipe)");
  }
  StatusOr<pid_t> pid = Spawn(o.program, std::move(argv), ChildEnv(o, child->rank, store, run_id),
                              child->rank > 0 ? devnull : -1, pipe_fds[1]);
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  if (!pid.ok()) {
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    return pid.status();
  }
  child->pid = *pid;
  child->err_fd = pipe_fds[0];
  child->running = true;
  return OkStatus();
}

// Writes every whole line in child->partial, prefixed; at EOF the rest too.
void ForwardLines(Child* child, bool eof) {
  size_t start = 0;
  for (size_t nl; (nl = child->partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    Say("[rank " + std::to_string(child->rank) + "] " + child->partial.substr(start, nl - start));
  }
  child->partial.erase(0, start);
  if (eof && !child->partial.empty()) {
    Say("[rank " + std::to_string(child->rank) + "] " + child->partial);
    child->partial.clear();
  }
}

// Waits up to `timeout` for output from ranks > 0 and forwards it.
void PumpOutput(std::vector<Child>& children, std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<Child*> owners;
  for (Child& c : children) {
    if (c.err_fd >= 0) fds.push_back({c.err_fd, POLLIN, 0}), owners.push_back(&c);
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);
    return;
  }
  if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    Child* c = owners[i];
    if (n > 0) {
      c->partial.append(buf, static_cast<size_t>(n));
      ForwardLines(c, /*eof=*/false);
    } else {
      ForwardLines(c, /*eof=*/true);
      ::close(c->err_fd);
      c->err_fd = -1;
    }
  }
}

// The exit code a rank's wait status stands for (1 when killed by a signal), and a message
// when that is a failure worth reporting (a rank stopped by the launcher's forwarded signal
// exits 130 or 143, which is not one while the launcher is stopping).
int ExitCodeOf(const Child& c, int status, bool stopping, std::string* message) {
  const std::string who = "rank " + std::to_string(c.rank);
  if (WIFSIGNALED(status)) {
    if (!c.killed) *message = who + " was killed by " + SignalName(WTERMSIG(status));
    return 1;
  }
  const int code = WEXITSTATUS(status);
  const bool expected = code == 0 || (stopping && (code == 130 || code == 143));
  if (!expected) *message = who + " exited with code " + std::to_string(code);
  return code;
}

struct Supervision {
  bool stopping = false;  // SIGTERM sent to the ranks
  int first_failure = 0;  // the first failing rank's exit code; 0 while none failed
  std::optional<SteadyClock::time_point> deadline;  // when survivors are killed
  int signals_forwarded = 0;
};

// Reaps every rank that exited, reporting failures. Of ranks found dead at once, one killed
// by a signal is reported first: the others most likely failed because it vanished.
void ReapExited(std::vector<Child>& children, const LaunchOptions& o, Supervision* s) {
  std::vector<std::pair<Child*, int>> exited;  // and its wait status
  for (Child& c : children) {
    if (!c.running) continue;
    int status = 0;
    const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    if (r < 0) status = W_EXITCODE(1, 0);  // cannot happen: only we reap our children
    c.running = false;
    exited.emplace_back(&c, status);
  }
  std::stable_sort(exited.begin(), exited.end(), [](const auto& a, const auto& b) {
    return WIFSIGNALED(a.second) && !WIFSIGNALED(b.second);
  });
  const bool had_failure = s->first_failure != 0;
  for (const auto& [child, status] : exited) {
    std::string message;
    const int code = ExitCodeOf(*child, status, s->stopping, &message);
    if (message.empty()) continue;
    Say("trainyard: " + message);
    if (s->first_failure == 0) s->first_failure = code == 0 ? 1 : code;
  }
  if (had_failure || s->first_failure == 0 || s->deadline) return;
  s->deadline = SteadyClock::now() + o.grace;
  if (std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running; })) {
    Say("trainyard: giving the other ranks up to " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(o.grace).count()) +
        " s to exit");
  }
}

void StopAll(std::vector<Child>& children, const LaunchOptions& o, Supervision* s) {
  for (const Child& c : children) {
    if (c.running) ::kill(c.pid, SIGTERM);
  }
  s->stopping = true;
  if (!s->deadline) s->deadline = SteadyClock::now() + o.grace;
}

// Forwards each SIGINT / SIGTERM the launcher got since the last call as SIGTERM.
void ForwardSignals(std::vector<Child>& children, const LaunchOptions& o, Supervision* s) {
  const int received = g_signals.load();
  if (received == s->signals_forwarded) return;
  s->signals_forwarded = received;
  StopAll(children, o, s);
}

void KillSurvivors(std::vector<Child>& children, const LaunchOptions& o) {
  for (Child& c : children) {
    if (!c.running || c.killed) continue;
    Say("trainyard: killing rank " + std::to_string(c.rank) + " (still running " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(o.grace).count()) +
        " s after the first failure or stop)");
    ::kill(c.pid, SIGKILL);
    c.killed = true;
  }
}

// Until every rank has exited (survivors are killed at the deadline, and given up on 10 s
// after that), then until their output ends (at most 2 s more). `stop`: stop them at once.
int Supervise(std::vector<Child>& children, const LaunchOptions& o, bool stop) {
  Supervision s;
  if (stop) StopAll(children, o, &s);
  auto running = [&] {
    return std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running; });
  };
  while (running()) {
    PumpOutput(children, 100ms);
    ReapExited(children, o, &s);
    ForwardSignals(children, o, &s);
    const auto now = SteadyClock::now();
    if (s.deadline && now >= *s.deadline) KillSurvivors(children, o);
    if (s.deadline && now >= *s.deadline + 10s) {
      Say("trainyard: error: ranks did not exit after SIGKILL; giving up on them");
      break;
    }
  }
  const auto drain_end = SteadyClock::now() + 2s;
  while (
      SteadyClock::now() < drain_end &&
      std::any_of(children.begin(), children.end(), [](const Child& c) { return c.err_fd >= 0; })) {
    PumpOutput(children, 100ms);
  }
  if (g_first_signal.load() != 0) return 128 + g_first_signal.load();
  return s.first_failure;
}

// An integer environment variable in [lo, hi]; `range` says where the bounds come from.
StatusOr<int> IntEnv(const char* name, int lo, int hi, const std::string& range) {
  const char* value = std::getenv(name);
  if (value == nullptr) return MissingEnv(name);
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || errno != 0 || n < lo || n > hi) {
    return InvalidArgumentError(std::string(name) + " = \"" + value +
                                "\": must be an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]" + range);
  }
  return static_cast<int>(n);
}

}  // namespace

StatusOr<std::optional<RankEnv>> ReadRankEnv() {
  if (std::getenv(kRankEnv) == nullptr) return std::optional<RankEnv>();
  RankEnv env;
  ASSIGN_OR_RETURN(env.world_size, IntEnv(kWorldSizeEnv, 1, kMaxRanks, ""));
  ASSIGN_OR_RETURN(env.rank, IntEnv(kRankEnv, 0, env.world_size - 1,
                                    " (" + std::string(kWorldSizeEnv) + " = " +
                                        std::to_string(env.world_size) + ")"));
  const char* store = std::getenv(kStoreEnv);
  if (store == nullptr) return MissingEnv(kStoreEnv);
  env.store = store;
  const size_t colon = env.store.rfind(':');
  const std::string port = colon == std::string::npos ? "" : env.store.substr(colon + 1);
  if (colon == 0 || port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return InvalidArgumentError(std::string(kStoreEnv) + " = \"" + env.store +
                                "\": must be host:port, e.g. 127.0.0.1:29500");
  }
  const char* run_id = std::getenv(kRunIdEnv);
  if (run_id == nullptr) return MissingEnv(kRunIdEnv);
  env.run_id = run_id;
  const bool id_ok = !env.run_id.empty() && env.run_id.size() <= 64 &&
                     std::all_of(env.run_id.begin(), env.run_id.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
                     });
  if (!id_ok) {
    return InvalidArgumentError(std::string(kRunIdEnv) + " = \"" + env.run_id +
                                "\": must be 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_'");
  }
  return std::optional<RankEnv>(std::move(env));
}

int Launch(const LaunchOptions& o) {
  StatusOr<std::unique_ptr<dist::TcpStoreServer>> server =
      dist::TcpStoreServer::Start("127.0.0.1", 0);
  if (!server.ok()) {
    Say("trainyard: error: starting the rendezvous store: " +
        std::string(server.status().message()));
    return 1;
  }
  const std::string run_id = RandomHex(16);
  if (!o.quiet) {
    Say("trainyard: launching " + std::to_string(o.nproc) + " ranks (run " + run_id + ", store " +
        (*server)->address() + ")");
  }
  ScopedStopSignals signals(OnSignal);

  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  std::vector<Child> children(static_cast<size_t>(o.nproc));
  int code = 0;
  for (int r = 0; r < o.nproc; ++r) {
    children[r].rank = r;
    Status started = StartChild(o, (*server)->address(), run_id, devnull, &children[r]);
    if (!started.ok()) {
      Say("trainyard: error: rank " + std::to_string(r) + ": " + std::string(started.message()));
      children.resize(static_cast<size_t>(r));
      code = 1;
      break;
    }
  }
  const int supervised = Supervise(children, o, /*stop=*/code != 0);
  if (code == 0) code = supervised;
  if (devnull >= 0) ::close(devnull);
  return code;
}

}  // namespace trainyard::client
