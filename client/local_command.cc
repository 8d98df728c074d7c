// `trainyard local SPEC --workers N`: the service on one machine. It starts a coordinator (its
// SQLite store in the state directory) and N worker daemons on loopback, as child processes of
// this one, submits the job, watches it to the end and stops them all. Ctrl-C cancels the job
// with a checkpoint first. docs/design/007-service.md, "trainyard local".
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "client/format.h"
#include "client/service_commands.h"
#include "client/spec_file.h"
#include "client/watch_printer.h"
#include "common/signals.h"

namespace trainyard::client {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};
void OnSignal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
}

// A daemon started by local: its output goes to a log file; it dies with this process.
struct Child {
  std::string name, log;
  pid_t pid = -1;
};

StatusOr<Child> Start(const std::string& name, std::vector<std::string> argv,
                      const std::string& log) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("opening " + log);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    return ErrnoStatus("starting " + name);
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // a terminal's Ctrl-C reaches only local, which stops the job first
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fd);
  return Child{name, log, pid};
}

bool Exited(Child& c) {
  if (c.pid < 0) return true;
  int status = 0;
  if (::waitpid(c.pid, &status, WNOHANG) == c.pid) c.pid = -1;
  return c.pid < 0;
}

// SIGTERM to all at once, then SIGKILL to those still running after `grace`.
void StopChildren(std::vector<Child*> children, std::chrono::milliseconds grace) {
  for (Child* c : children) {
    if (!Exited(*c)) ::kill(c->pid, SIGTERM);
  }
  const auto deadline = SteadyClock::now() + grace;
  for (Child* c : children) {
    while (!Exited(*c) && SteadyClock::now() < deadline) std::this_thread::sleep_for(20ms);
    if (!Exited(*c)) {
      ::kill(c->pid, SIGKILL);
      ::waitpid(c->pid, nullptr, 0);
      c->pid = -1;
    }
  }
}

std::string LastLines(const std::string& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size();
       ++i) {
    out += "  " + lines[i] + "\n";
  }
  return out;
}

// Waits up to `timeout` for `path` to appear (the daemons write it once serving); its lines.
StatusOr<std::vector<std::string>> WaitForFile(const std::string& path, Child& c,
                                               std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    std::ifstream in(path);
    if (in) {
      std::vector<std::string> lines;
      for (std::string line; std::getline(in, line);) lines.push_back(line);
      return lines;
    }
    if (Exited(c)) {
      return UnavailableError(c.name + " exited at start; the end of " + c.log + ":\n" +
                              LastLines(c.log, 5));
    }
    std::this_thread::sleep_for(20ms);
  }
  return DeadlineExceededError(c.name + " did not start within " +
                               std::to_string(timeout.count() / 1000) + " s; see " + c.log);
}

std::string BinDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string self = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "trainyard";
  return self.substr(0, self.rfind('/'));
}

class Local {
 public:
  explicit Local(const Flags& f) : f_(f) {}
  ~Local() {
    std::vector<Child*> workers;
    for (Child& w : workers_) workers.push_back(&w);
    StopChildren(workers, 15s);  // their ranks first (the workers stop them)
    StopChildren({&coordinator_}, 5s);
  }

  int Run() {
    StatusOr<int64_t> workers = f_.Int("workers", 1, 64);
    StatusOr<int64_t> slots = f_.Int("slots-per-worker", 1, 64);
    if (!workers.ok()) return CommandError(std::string(workers.status().message()), 2);
    if (!slots.ok()) return CommandError(std::string(slots.status().message()), 2);
    const std::string spec_path = f_.positional()[0];
    StatusOr<Json> spec = LoadSpecJson(spec_path, f_.All("set"));
    if (!spec.ok()) return CommandError(std::string(spec.status().message()), 2);
    // Unless the spec says otherwise, the job uses every slot of the local workers.
    if (!SetsField(*spec, "parallelism.world_size")) {
      Status s =
          ApplyOverride("parallelism.world_size=" + std::to_string(*workers * *slots), &*spec);
      if (!s.ok()) return CommandError(std::string(s.message()), 2);
    }

    const std::string state = f_.Get("state-dir");
    std::error_code ec;
    std::filesystem::create_directories(state + "/logs", ec);
    if (ec) return CommandError("creating " + state + "/logs: " + ec.message(), 1);
    Status started = StartDaemons(state, static_cast<int>(*workers), static_cast<int>(*slots));
    if (!started.ok()) return CommandError(std::string(started.message()), 1);

    ScopedStopSignals signals(OnSignal);
    StatusOr<v1::Job> job = client_->Submit(spec->Dump());
    if (!job.ok()) {
      return CommandError(
          spec_path + ": " + std::string(job.status().message()),
          CodeFor(job.status()) == 2 || job.status().code() == StatusCode::kFailedPrecondition ? 2
                                                                                               : 1);
    }
    const bool json = f_.Get("output") == "json";
    const bool quiet = f_.On("quiet");
    if (!quiet) PrintGraphSize(*spec);
    if (!quiet) {
      std::fprintf(stderr,
                   "trainyard local: job %s on %lld worker%s (coordinator %s, metrics "
                   "http://%s/metrics; logs in %s/logs)\n",
                   job->id().c_str(), static_cast<long long>(*workers), *workers == 1 ? "" : "s",
                   client_->options().coordinator.c_str(), coordinator_metrics_.c_str(),
                   state.c_str());
    }
    std::atomic<bool> watching{true};
    std::thread canceller([&] {
      while (watching && g_signal.load() == 0) std::this_thread::sleep_for(20ms);
      if (!watching) return;
      std::fprintf(stderr, "\ntrainyard local: cancelling %s (a checkpoint is saved first)\n",
                   job->id().c_str());
      (void)client_->Cancel(job->id(), /*checkpoint=*/true);
    });
    WatchPrinter printer(/*json=*/false, quiet);
    Status watched = client_->Watch(job->id(), [&](const v1::JobEvent& e) {
      printer.Print(e);
      return true;
    });
    printer.Close();
    watching = false;
    canceller.join();
    if (!watched.ok())
      return CommandError("watching " + job->id() + ": " + std::string(watched.message()), 1);
    StatusOr<v1::Job> final_job = client_->GetJob(job->id());
    if (!final_job.ok()) return CommandError(std::string(final_job.status().message()), 1);
    if (json) {
      std::printf("%s\n", ToJsonText(*final_job).c_str());
    } else {
      PrintSummary(*final_job);
    }
    std::fflush(stdout);
    if (g_signal.load() != 0) return 128 + g_signal.load();
    return ExitCodeOf(final_job->state());
  }

 private:
  Status StartDaemons(const std::string& state, int workers, int slots) {
    const std::string bin = BinDir();
    const std::string ready = state + "/coordinator.ready";
    ::unlink(ready.c_str());
    ASSIGN_OR_RETURN(
        coordinator_,
        Start("trainyard-coordinator",
              {bin + "/trainyard-coordinator", "--listen", "127.0.0.1:0", "--metrics-listen",
               "127.0.0.1:0", "--state-dir", state, "--checkpoint-root", state + "/checkpoints",
               "--heartbeat-timeout", f_.Get("heartbeat-timeout"), "--ready-file", ready},
              state + "/logs/coordinator.log"));
    ASSIGN_OR_RETURN(std::vector<std::string> addresses, WaitForFile(ready, coordinator_, 20s));
    if (addresses.size() < 2) return InternalError("malformed " + ready);
    coordinator_metrics_ = addresses[1];
    ConnectOptions co;
    co.coordinator = addresses[0];
    ASSIGN_OR_RETURN(client_, ServiceClient::Connect(co));
    for (int i = 0; i < workers; ++i) {
      const std::string name = "local-" + std::to_string(i);
      ASSIGN_OR_RETURN(Child w, Start("worker " + name,
                                      {bin + "/trainyard-worker", "--coordinator", addresses[0],
                                       "--name", name, "--cpu-slots", std::to_string(slots),
                                       // One machine: its GPUs are offered once, by worker 0.
                                       "--gpus", i == 0 ? "auto" : "none", "--metrics-listen",
                                       "127.0.0.1:0", "--work-dir", state + "/" + name},
                                      state + "/logs/" + name + ".log"));
      workers_.push_back(std::move(w));
    }
    // Every worker registered and alive.
    const auto deadline = SteadyClock::now() + 30s;
    while (true) {
      StatusOr<std::vector<v1::WorkerInfo>> listed = client_->ListWorkers();
      int alive = 0;
      if (listed.ok()) {
        for (const v1::WorkerInfo& w : *listed)
          alive += w.alive() && w.name().rfind("local-", 0) == 0;
      }
      if (alive >= workers) return OkStatus();
      for (Child& w : workers_) {
        if (Exited(w))
          return UnavailableError(w.name + " exited at start; the end of " + w.log + ":\n" +
                                  LastLines(w.log, 5));
      }
      if (SteadyClock::now() >= deadline) {
        return DeadlineExceededError("the workers did not register within 30 s; see " + state +
                                     "/logs");
      }
      std::this_thread::sleep_for(50ms);
    }
  }

  // A model graph's size, as `trainyard train` prints it (the coordinator has checked it).
  static void PrintGraphSize(const Json& json) {
    StatusOr<spec::JobSpec> spec = spec::ParseJobSpec(json);
    if (!spec.ok() || spec->model.arch != "graph") return;
    StatusOr<spec::CompiledGraph> g = spec::CompileGraph(spec->model.graph);
    if (!g.ok()) return;
    std::fprintf(stderr, "trainyard local: %s: graph (%s parameters, %s)\n", spec->name.c_str(),
                 Grouped(static_cast<double>(g->parameters)).c_str(), FlopsPerSample(*g).c_str());
  }

  static void PrintSummary(const v1::Job& j) {
    std::string out = j.id() + ": " + StateName(j.state());
    if (!j.reason().empty()) out += " (" + j.reason() + ")";
    out += "\n";
    char buf[256];
    if (j.last_step().step() > 0) {
      std::snprintf(buf, sizeof(buf), "  steps        %lld of %lld, last loss %.4f, %d restart%s\n",
                    static_cast<long long>(j.last_step().step()),
                    static_cast<long long>(j.last_step().total_steps()), j.last_step().loss(),
                    j.restarts(), j.restarts() == 1 ? "" : "s");
      out += buf;
    }
    if (j.last_eval().samples() > 0) {
      std::snprintf(buf, sizeof(buf), "  eval         loss %.4f, accuracy %.2f%% on %lld samples\n",
                    j.last_eval().loss(), 100 * j.last_eval().accuracy(),
                    static_cast<long long>(j.last_eval().samples()));
      out += buf;
    }
    if (!j.checkpoint().empty()) out += "  checkpoint   " + j.checkpoint() + "\n";
    std::fputs(out.c_str(), stdout);
  }

  const Flags& f_;
  Child coordinator_;
  std::vector<Child> workers_;
  std::string coordinator_metrics_;
  std::unique_ptr<ServiceClient> client_;
};

}  // namespace

int RunLocalCommand(const std::vector<std::string>& args) {
  Flags f(
      "usage: trainyard local SPEC.yaml [--workers N] [flags]\n\n"
      "Runs the job on this machine: a coordinator and N worker daemons on loopback,\n"
      "watched to the end (Ctrl-C cancels it after a checkpoint). Without\n"
      "parallelism.world_size in the spec the job uses every slot (N x slots per worker).\n"
      "Exit code: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 130/143 stopped by a signal.\n\nflags:");
  f.Value("workers", "2", "worker daemons to start")
      .Value("slots-per-worker", "1", "CPU slots (ranks) of each worker")
      .Value("state-dir", ".trainyard/local", "the coordinator's job store, checkpoints and logs")
      .Value("set", "", "override one spec field (repeatable)")
      .Value("heartbeat-timeout", "10", "seconds until a silent worker is lost")
      .Switch("quiet", "no progress (the summary still prints)")
      .Value("output", "text", "text or json (the final job)")
      .Alias("-o", "output");
  int code = 0;
  if (!ParseFlags(f, args, 1, &code)) return code;
  return Local(f).Run();
}

}  // namespace trainyard::client
