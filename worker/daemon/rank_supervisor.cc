#include "worker/daemon/rank_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/durable_file.h"
#include "common/logging.h"
#include "kernels/cuda/backend.h"
#include "worker/daemon/rank.h"
#include "worker/dist/nccl_loader.h"

extern char** environ;

namespace trainyard::daemon {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr size_t kTailLines = 5;

int64_t MsSince(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - t).count();
}

// Resident memory of `pid` in bytes (0 when it is gone).
int64_t Rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * ::sysconf(_SC_PAGESIZE);
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

RankSupervisor::~RankSupervisor() {
  for (auto& [key, r] : ranks_) {
    if (r.pid > 0 && !r.status.exited()) {
      ::kill(-r.pid, SIGKILL);
      if (r.wait_status < 0) ::waitpid(r.pid, nullptr, 0);
    }
    if (r.report_fd >= 0) ::close(r.report_fd);
    if (r.err_fd >= 0) ::close(r.err_fd);
  }
}

Status RankSupervisor::Start(const trainyard::v1::Assignment& a) {
  const std::string dir =
      options_.work_dir + "/" + a.job_id() + "/attempt-" + std::to_string(a.attempt());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError("creating " + dir + ": " + ec.message());
  const std::string spec_path = dir + "/spec.json";
  RETURN_IF_ERROR(WriteFileAtomically(spec_path, a.spec_json()));
  for (const auto& p : a.ranks()) {
    if (ranks_.count({a.job_id(), a.attempt(), p.rank()})) continue;
    RETURN_IF_ERROR(Spawn(a, p, spec_path));
  }
  return OkStatus();
}

Status RankSupervisor::Spawn(const trainyard::v1::Assignment& a,
                             const trainyard::v1::RankPlacement& p, const std::string& spec_path) {
  int report[2], err[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return ErrnoStatus("starting a rank (pipe)");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(report[0]);
    ::close(report[1]);
    return ErrnoStatus("starting a rank (pipe)");
  }
  constexpr int kChildReportFd = 3;
  std::vector<std::string> env;
  // The daemon's own TRAINYARD_ settings stay with it, except where to find the libraries.
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var(*e);
    if (var.rfind("TRAINYARD_", 0) != 0 ||
        var.rfind(std::string(kernels::cuda::kCudaLibraryEnv) + "=", 0) == 0 ||
        var.rfind(std::string(dist::kNcclLibraryEnv) + "=", 0) == 0) {
      env.push_back(var);
    }
  }
  env.insert(env.end(), options_.env.begin(), options_.env.end());
  env.push_back(std::string(kJobEnv) + "=" + a.job_id());
  env.push_back(std::string(kJobUidEnv) + "=" + a.job_uid());
  env.push_back(std::string(kAttemptEnv) + "=" + std::to_string(a.attempt()));
  env.push_back(std::string(kSecretEnv) + "=" + a.secret());
  env.push_back(std::string(kRankEnv) + "=" + std::to_string(p.rank()));
  env.push_back(std::string(kSlotEnv) + "=" + std::to_string(p.slot()));
  env.push_back(std::string(kWorldSizeEnv) + "=" + std::to_string(a.world_size()));
  env.push_back(std::string(kSpecEnv) + "=" + spec_path);
  env.push_back(std::string(kReportFdEnv) + "=" + std::to_string(kChildReportFd));
  if (std::getenv("TY_NUM_THREADS") == nullptr && options_.threads_per_rank > 0) {
    env.push_back("TY_NUM_THREADS=" + std::to_string(options_.threads_per_rank));
  }
  std::vector<std::string> argv = {options_.program, "rank"};
  std::vector<char*> argv_p = Pointers(argv), env_p = Pointers(env);
  const pid_t parent = ::getpid();
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const pid_t pid = ::fork();
  if (pid < 0) {
    Status failed = ErrnoStatus("starting a rank (fork)");
    for (int fd : {report[0], report[1], err[0], err[1], devnull}) {
      if (fd >= 0) ::close(fd);
    }
    return failed;
  }
  if (pid == 0) {  // only async-signal-safe calls from here
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    if (report[1] == kChildReportFd) {
      ::fcntl(kChildReportFd, F_SETFD, 0);  // dup2 onto itself would keep O_CLOEXEC
    } else {
      ::dup2(report[1], kChildReportFd);  // dup2 clears O_CLOEXEC on the copy
    }
    ::dup2(err[1], STDERR_FILENO);
    if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
    ::execve(argv_p[0], argv_p.data(), env_p.data());
    const char msg[] = "trainyard-worker: cannot run the rank program\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // as the child does: the group exists before Stop can signal it
  if (devnull >= 0) ::close(devnull);
  ::close(report[1]);
  ::close(err[1]);
  Rank& r = ranks_[{a.job_id(), a.attempt(), p.rank()}];
  r.status.set_job_id(a.job_id());
  r.status.set_attempt(a.attempt());
  r.status.set_rank(p.rank());
  r.status.set_phase("starting");
  r.pid = pid;
  r.report_fd = report[0];
  r.err_fd = err[0];
  r.last_report = r.phase_since = r.collective_since = SteadyClock::now();
  TY_LOG(INFO) << "started rank " << p.rank() << " of " << a.job_id() << " attempt " << a.attempt()
               << " (pid " << pid << ", slot " << p.slot() << ")";
  return OkStatus();
}

void RankSupervisor::Stop(const std::string& job_id, int attempt, bool checkpoint) {
  for (auto& [key, r] : ranks_) {
    if (std::get<0>(key) != job_id || (attempt != 0 && std::get<1>(key) != attempt)) continue;
    if (r.status.exited() || r.kill_at != SteadyClock::time_point{}) continue;
    // Signals go to the rank's process group (its pid: it was made a group leader at fork),
    // which outlives the reaped rank while anything it started runs.
    if (checkpoint) {
      ::kill(-r.pid, SIGTERM);
      r.kill_at = SteadyClock::now() + options_.grace;
    } else {
      ::kill(-r.pid, SIGKILL);
      r.kill_at = SteadyClock::now();
      r.killed = true;
    }
    TY_LOG(INFO) << (checkpoint ? "stopping" : "killing") << " rank " << std::get<2>(key) << " of "
                 << job_id << " attempt " << std::get<1>(key);
  }
}

void RankSupervisor::StopAll(bool checkpoint) {
  std::vector<std::pair<std::string, int>> attempts;
  for (const auto& [key, r] : ranks_) attempts.emplace_back(std::get<0>(key), std::get<1>(key));
  for (const auto& [job, attempt] : attempts) Stop(job, attempt, checkpoint);
}

void RankSupervisor::OnLine(Rank& r, const std::string& line) {
  StatusOr<Json> json = Json::Parse(line);
  if (!json.ok() || !json->is_object()) return;  // not ours: ignored
  r.last_report = SteadyClock::now();
  const Json* type = json->Find("type");
  if (type == nullptr || !type->is_string()) return;
  if (type->string_value() != "status") {
    if (type->string_value() == "step") {
      if (const Json* step = json->Find("step"); step && step->is_integer()) {
        r.status.set_step(step->int_value());
      }
    }
    if (options_.on_report) options_.on_report(r.status, *json);
    return;
  }
  auto num = [&](const char* key) {
    const Json* v = json->Find(key);
    return v && v->is_integer() ? v->int_value() : 0;
  };
  r.status.set_step(num("step"));
  const Json* phase = json->Find("phase");
  if (phase && phase->is_string()) r.status.set_phase(phase->string_value());
  r.status.set_collectives_issued(num("issued"));
  r.status.set_collectives_done(num("done"));
  r.phase_since = r.last_report - std::chrono::milliseconds(num("phase_age_ms"));
  r.collective_since = r.last_report - std::chrono::milliseconds(num("collective_age_ms"));
}

void RankSupervisor::ReadReports(Rank& r, bool eof) {
  size_t start = 0;
  for (size_t nl; (nl = r.report_partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    OnLine(r, r.report_partial.substr(start, nl - start));
  }
  r.report_partial.erase(0, start);
  if (eof) r.report_partial.clear();
}

void RankSupervisor::ReadStderr(Rank& r, bool eof) {
  size_t start = 0;
  for (size_t nl; (nl = r.err_partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = r.err_partial.substr(start, nl - start);
    TY_LOG(INFO) << "[" << r.status.job_id() << " rank " << r.status.rank() << "] " << line;
    r.err_tail.push_back(line);
    if (r.err_tail.size() > kTailLines) r.err_tail.pop_front();
  }
  r.err_partial.erase(0, start);
  if (eof && !r.err_partial.empty()) {
    r.err_tail.push_back(r.err_partial);
    r.err_partial.clear();
  }
}

void RankSupervisor::Poll(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank*, bool>> owners;  // and whether it is the report pipe
  for (auto& [key, r] : ranks_) {
    if (r.report_fd >= 0) fds.push_back({r.report_fd, POLLIN, 0}), owners.push_back({&r, true});
    if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0}), owners.push_back({&r, false});
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);
  } else if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [r, is_report] = owners[i];
      char buf[16384];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      std::string& partial = is_report ? r->report_partial : r->err_partial;
      if (n > 0) partial.append(buf, static_cast<size_t>(n));
      const bool eof = n <= 0;
      if (is_report) {
        ReadReports(*r, eof);
      } else {
        ReadStderr(*r, eof);
      }
      if (eof) {
        ::close(fds[i].fd);
        (is_report ? r->report_fd : r->err_fd) = -1;
      }
    }
  }
  Reap();
}

void RankSupervisor::Reap() {
  const auto now = SteadyClock::now();
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    Rank& r = it->second;
    if (r.status.exited()) {
      it = now - r.exited_at > 10min ? ranks_.erase(it) : std::next(it);
      continue;
    }
    if (r.kill_at != SteadyClock::time_point{} && now >= r.kill_at && !r.killed) {
      ::kill(-r.pid, SIGKILL);  // its process group: whatever it started goes too
      r.killed = true;
    }
    // The exit counts once its pipes are drained (its last reports and words come first), or
    // 2 s after it exited when something it started still holds them open.
    if (r.wait_status < 0) {
      int status = 0;
      const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
      if (got == 0) {
        ++it;
        continue;
      }
      r.wait_status = got < 0 ? W_EXITCODE(1, 0) : status;
      r.reaped_at = now;
    }
    const bool pipes_open = r.report_fd >= 0 || r.err_fd >= 0;
    if (pipes_open && now - r.reaped_at < 2s) {
      ++it;
      continue;
    }
    for (int* fd : {&r.report_fd, &r.err_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
    const int status = r.wait_status;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.status.set_exited(true);
    r.status.set_exit_code(code);
    r.exited_at = now;
    if (code != 0) {
      std::string tail;
      for (const std::string& line : r.err_tail) tail += (tail.empty() ? "" : " | ") + line;
      // A SIGKILL this worker did not send is, as good as always, the kernel's OOM killer,
      // which leaves the rank no word of its own.
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && !r.killed) {
        tail =
            "killed by SIGKILL, not by this worker: most likely the kernel's out-of-memory "
            "killer (see dmesg on this node); lower the job's memory (batch_size, the "
            "model's size or context) or give the worker less to run at once" +
            (tail.empty() ? "" : " | " + tail);
      }
      r.status.set_error(tail);
    }
    TY_LOG(INFO) << "rank " << r.status.rank() << " of " << r.status.job_id() << " attempt "
                 << r.status.attempt() << " exited with " << code;
    ++it;
  }
}

std::vector<trainyard::v1::RankStatus> RankSupervisor::Statuses() const {
  std::vector<trainyard::v1::RankStatus> out;
  for (const auto& [key, r] : ranks_) {
    trainyard::v1::RankStatus s = r.status;
    if (!s.exited()) {
      s.set_report_age_ms(MsSince(r.last_report));
      s.set_phase_age_ms(MsSince(r.phase_since));
      s.set_collective_age_ms(MsSince(r.collective_since));
      s.set_memory_bytes(Rss(r.pid));
    }
    out.push_back(std::move(s));
  }
  return out;
}

int RankSupervisor::running() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(),
                                        [](const auto& kv) { return !kv.second.status.exited(); }));
}

}  // namespace trainyard::daemon
