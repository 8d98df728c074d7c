#include "client/launch.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "common/random_id.h"
#include "common/signals.h"
#include "worker/dist/store.h"
#include "worker/ranks/env.h"
#include "worker/ranks/process.h"

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

using ranks::RankProcess;

// One rank as the launcher sees it.
struct Child {
  int rank = 0;
  std::unique_ptr<RankProcess> process;  // ranks > 0: stderr captured
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

// Rank `rank`'s environment: this process's without the launcher's variables, plus the
// rank's. Ranks share the cores: without TY_NUM_THREADS each gets cores / nproc kernel threads
// (at least 1).
std::vector<std::string> ChildEnv(const LaunchOptions& o, int rank, const std::string& store,
                                  const std::string& run_id) {
  auto drop = [](const std::string& name) {
    return name == ranks::kRankEnv || name == ranks::kWorldSizeEnv || name == ranks::kStoreEnv ||
           name == ranks::kRunIdEnv;
  };
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return ranks::RankEnvironment(
      drop,
      {std::string(ranks::kRankEnv) + "=" + std::to_string(rank),
       std::string(ranks::kWorldSizeEnv) + "=" + std::to_string(o.nproc),
       std::string(ranks::kStoreEnv) + "=" + store, std::string(ranks::kRunIdEnv) + "=" + run_id},
      std::max(1, cores / o.nproc));
}

// Ranks above 0 get --quiet, a discarded stdout and a captured stderr (forwarded prefixed).
Status StartChild(const LaunchOptions& o, const std::string& store, const std::string& run_id,
                  Child* child) {
  ranks::ProcessOptions p;
  p.program = o.program;
  p.argv = {"trainyard"};
  p.argv.insert(p.argv.end(), o.args.begin(), o.args.end());
  if (child->rank > 0) p.argv.push_back("--quiet");
  p.env = ChildEnv(o, child->rank, store, run_id);
  p.discard_stdout = p.capture_stderr = child->rank > 0;
  ASSIGN_OR_RETURN(child->process, RankProcess::Start(p));
  child->running = true;
  return OkStatus();
}

// Waits up to `timeout` for output from ranks > 0 and forwards it, each line prefixed.
void PumpOutput(std::vector<Child>& children, std::chrono::milliseconds timeout) {
  std::vector<RankProcess*> processes;
  for (Child& c : children) processes.push_back(c.process.get());
  RankProcess::PollLines(processes, timeout,
                         [&](size_t i, RankProcess::Stream, const std::string& line) {
                           Say("[rank " + std::to_string(children[i].rank) + "] " + line);
                         });
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
    if (!c.running || !c.process->Reap()) continue;
    c.running = false;
    exited.emplace_back(&c, c.process->wait_status());
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
    if (c.running) c.process->Signal(SIGTERM);
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
    c.process->Signal(SIGKILL);
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
  while (SteadyClock::now() < drain_end &&
         std::any_of(children.begin(), children.end(),
                     [](const Child& c) { return c.process->output_open(); })) {
    PumpOutput(children, 100ms);
  }
  if (g_first_signal.load() != 0) return 128 + g_first_signal.load();
  return s.first_failure;
}

}  // namespace

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

  std::vector<Child> children(static_cast<size_t>(o.nproc));
  int code = 0;
  for (int r = 0; r < o.nproc; ++r) {
    children[r].rank = r;
    Status started = StartChild(o, (*server)->address(), run_id, &children[r]);
    if (!started.ok()) {
      Say("trainyard: error: rank " + std::to_string(r) + ": " + std::string(started.message()));
      children.resize(static_cast<size_t>(r));
      code = 1;
      break;
    }
  }
  const int supervised = Supervise(children, o, /*stop=*/code != 0);
  if (code == 0) code = supervised;
  return code;
}

}  // namespace trainyard::client
