#include "worker/daemon/rank_supervisor.h"

#include <signal.h>
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
#include "worker/daemon/flight_report.h"
#include "worker/daemon/rank.h"
#include "worker/dist/nccl_loader.h"
#include "worker/dist/process_group.h"
#include "worker/ranks/env.h"

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

// The daemon's own TRAINYARD_ settings stay with it, except where to find the libraries.
bool DaemonOnly(const std::string& name) {
  return name.rfind("TRAINYARD_", 0) == 0 && name != kernels::cuda::kCudaLibraryEnv &&
         name != dist::kNcclLibraryEnv;
}

}  // namespace

RankSupervisor::~RankSupervisor() = default;  // each RankProcess kills and reaps its rank

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
  std::vector<std::string> extra = options_.env;
  for (const auto& [name, value] : std::initializer_list<std::pair<const char*, std::string>>{
           {ranks::kJobEnv, a.job_id()},
           {ranks::kJobUidEnv, a.job_uid()},
           {ranks::kAttemptEnv, std::to_string(a.attempt())},
           {ranks::kSecretEnv, a.secret()},
           {ranks::kRankEnv, std::to_string(p.rank())},
           {ranks::kSlotEnv, std::to_string(p.slot())},
           {ranks::kWorldSizeEnv, std::to_string(a.world_size())},
           {ranks::kSpecEnv, spec_path},
           {ranks::kReportFdEnv, std::to_string(ranks::kChildReportFd)},
           {ranks::kCommandFdEnv, std::to_string(ranks::kChildCommandFd)}}) {
    extra.push_back(std::string(name) + "=" + value);
  }
  ranks::ProcessOptions po;
  po.program = options_.program;
  po.argv = {options_.program, "rank"};
  po.env = ranks::RankEnvironment(DaemonOnly, extra, options_.threads_per_rank);
  po.discard_stdout = po.capture_stderr = po.report_pipe = po.command_pipe = true;
  ASSIGN_OR_RETURN(std::unique_ptr<ranks::RankProcess> process, ranks::RankProcess::Start(po));
  Rank& r = ranks_[{a.job_id(), a.attempt(), p.rank()}];
  r.status.set_job_id(a.job_id());
  r.status.set_attempt(a.attempt());
  r.status.set_rank(p.rank());
  r.status.set_phase("starting");
  r.process = std::move(process);
  r.last_report = r.phase_since = r.collective_since = SteadyClock::now();
  TY_LOG(INFO) << "started rank " << p.rank() << " of " << a.job_id() << " attempt " << a.attempt()
               << " (pid " << r.process->pid() << ", slot " << p.slot() << ")";
  return OkStatus();
}

void RankSupervisor::Stop(const std::string& job_id, int attempt, bool checkpoint) {
  for (auto& [key, r] : ranks_) {
    if (std::get<0>(key) != job_id || (attempt != 0 && std::get<1>(key) != attempt)) continue;
    if (r.status.exited() || r.kill_at != SteadyClock::time_point{}) continue;
    // Signals go to the rank's process group (its pid: it was made a group leader at fork),
    // which outlives the reaped rank while anything it started runs.
    if (checkpoint) {
      r.process->Signal(SIGTERM);
      r.kill_at = SteadyClock::now() + options_.grace;
    } else {
      r.process->Signal(SIGKILL);
      r.kill_at = SteadyClock::now();
      r.killed = true;
    }
    TY_LOG(INFO) << (checkpoint ? "stopping" : "killing") << " rank " << std::get<2>(key) << " of "
                 << job_id << " attempt " << std::get<1>(key);
  }
}

void RankSupervisor::Regroup(const trainyard::v1::Regroup& g) {
  std::map<int, int> to;  // from rank: rank
  for (const auto& r : g.ranks()) to[r.from_rank()] = r.rank();
  std::vector<Key> listed;
  for (const auto& [key, r] : ranks_) {
    if (std::get<0>(key) != g.job_id() || std::get<1>(key) != g.from_attempt()) continue;
    if (to.count(std::get<2>(key))) listed.push_back(key);
  }
  for (const Key& key : listed) {
    const int rank = to[std::get<2>(key)];
    if (ranks_.count({g.job_id(), g.attempt(), rank})) continue;  // a repeat
    auto node = ranks_.extract(key);
    node.key() = Key{g.job_id(), g.attempt(), rank};
    Rank& r = node.mapped();
    r.status.set_attempt(g.attempt());
    r.status.set_rank(rank);
    r.status.set_regrouping(false);  // until it says it left the new group
    r.status.clear_group_error();
    r.status.set_collectives_issued(0);  // none yet in the new group
    r.status.set_collectives_done(0);
    r.collective_since = SteadyClock::now();
    const bool told =
        r.process->SendCommand(Json::Object({{"type", "regroup"},
                                             {"attempt", static_cast<int64_t>(g.attempt())},
                                             {"secret", g.secret()},
                                             {"rank", static_cast<int64_t>(rank)},
                                             {"world_size", static_cast<int64_t>(g.world_size())},
                                             {"at_step_boundary", g.at_step_boundary()}})
                                   .Dump());
    TY_LOG(INFO) << "rank " << std::get<2>(key) << " of " << g.job_id() << " attempt "
                 << g.from_attempt() << " continues as rank " << rank << " of " << g.world_size()
                 << " in attempt " << g.attempt() << (told ? "" : " (its command pipe is gone)");
    ranks_.insert(std::move(node));
  }
  Stop(g.job_id(), g.from_attempt(), /*checkpoint=*/false);  // the ranks not listed
}

void RankSupervisor::StopAll(bool checkpoint) {
  std::vector<std::pair<std::string, int>> attempts;
  for (const auto& [key, r] : ranks_) attempts.emplace_back(std::get<0>(key), std::get<1>(key));
  for (const auto& [job, attempt] : attempts) Stop(job, attempt, checkpoint);
}

void RankSupervisor::OnReport(Rank& r, const std::string& line) {
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
  // Elastic jobs: a line about the group of an earlier attempt (a rank rekeyed by Regroup that
  // has not left it yet) says nothing of this attempt's collectives, nor that it regroups.
  const Json* regrouping = json->Find("regrouping");
  const Json* group_attempt = json->Find("attempt");
  const bool left = regrouping && regrouping->is_bool() && regrouping->bool_value();
  const bool of_this = !group_attempt || !group_attempt->is_integer() ||
                       group_attempt->int_value() >= r.status.attempt();
  r.status.set_collectives_issued(of_this ? num("issued") : 0);
  r.status.set_collectives_done(of_this ? num("done") : 0);
  r.status.set_regrouping(left && of_this);
  const Json* why = json->Find("group_error");
  r.status.set_group_error(left && of_this && why && why->is_string() ? why->string_value() : "");
  r.status.clear_links();
  if (const Json* links = json->Find("links"); links && links->is_array()) {
    for (const Json& l : links->items()) {
      const Json* peer = l.Find("peer");
      const Json* rtt = l.Find("rtt_us");
      if (!peer || !peer->is_string() || !rtt || !rtt->is_integer()) continue;
      v1::PeerLink* out = r.status.add_links();
      out->set_peer(peer->string_value());
      out->set_rtt_us(rtt->int_value());
    }
  }
  ParseFlightRecords(*json, &r.status);
  r.phase_since = r.last_report - std::chrono::milliseconds(num("phase_age_ms"));
  r.collective_since =
      r.last_report - std::chrono::milliseconds(of_this ? num("collective_age_ms") : 0);
}

void RankSupervisor::OnStderr(Rank& r, const std::string& line) {
  TY_LOG(INFO) << "[" << r.status.job_id() << " rank " << r.status.rank() << "] " << line;
  r.err_tail.push_back(line);
  if (r.err_tail.size() > kTailLines) r.err_tail.pop_front();
}

void RankSupervisor::Poll(std::chrono::milliseconds timeout) {
  std::vector<ranks::RankProcess*> processes;
  std::vector<Rank*> owners;  // of each process
  for (auto& [key, r] : ranks_) {
    processes.push_back(r.process.get());
    owners.push_back(&r);
  }
  ranks::RankProcess::PollLines(
      processes, timeout, [&](size_t i, ranks::RankProcess::Stream s, const std::string& line) {
        s == ranks::RankProcess::Stream::kReport ? OnReport(*owners[i], line)
                                                 : OnStderr(*owners[i], line);
      });
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
      r.process->Signal(SIGKILL);  // its process group: whatever it started goes too
      r.killed = true;
    }
    // The exit counts once its pipes are drained (its last reports and words come first), or
    // 2 s after it exited when something it started still holds them open.
    if (!r.process->reaped()) {
      if (!r.process->Reap()) {
        ++it;
        continue;
      }
      r.reaped_at = now;
    }
    if (r.process->output_open() && now - r.reaped_at < 2s) {
      ++it;
      continue;
    }
    r.process->CloseOutput();
    Exited(r, now);
    ++it;
  }
}

void RankSupervisor::Exited(Rank& r, SteadyClock::time_point now) {
  const int status = r.process->wait_status();
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
  // A rank that died while its group was being made may leave a shared-memory segment behind.
  if (const int removed = dist::RemoveOrphanedSegments(); removed > 0) {
    TY_LOG(INFO) << "removed " << removed << " shared-memory segment(s) left by dead ranks";
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
      s.set_memory_bytes(Rss(r.process->pid()));
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
