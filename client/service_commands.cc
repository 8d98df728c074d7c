#include "client/service_commands.h"

#include <cmath>
#include <cstdio>
#include <ctime>

#include "client/debug_command.h"
#include "client/spec_file.h"
#include "client/watch_printer.h"

namespace trainyard::client {
namespace {

std::string Age(int64_t ms) {
  if (ms <= 0) return "-";
  const double s =
      (static_cast<double>(std::time(nullptr)) * 1000 - static_cast<double>(ms)) / 1000;
  if (s < 120) return std::to_string(static_cast<int>(s)) + "s";
  if (s < 7200) return std::to_string(static_cast<int>(s / 60)) + "m";
  if (s < 172800) return std::to_string(static_cast<int>(s / 3600)) + "h";
  return std::to_string(static_cast<int>(s / 86400)) + "d";
}

std::string Fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

StatusOr<std::unique_ptr<ServiceClient>> ConnectWith(const Flags& f) {
  return ServiceClient::Connect(ReadConnectFlags(f));
}

void PrintJobLine(const v1::Job& j) {
  std::printf(
      "%-28s %-11s %9s %9s %8s %5s\n", j.id().c_str(), StateName(j.state()).c_str(),
      (std::to_string(j.last_step().step()) + "/" + std::to_string(j.last_step().total_steps()))
          .c_str(),
      Fixed(j.last_step().loss(), 4).c_str(), Age(j.created_ms()).c_str(),
      std::to_string(j.restarts()).c_str());
}

void Describe(const v1::Job& j) {
  std::printf("job        %s (%s)\n", j.id().c_str(), j.name().c_str());
  std::printf("state      %s%s\n", StateName(j.state()).c_str(),
              j.reason().empty() ? "" : (": " + j.reason()).c_str());
  std::printf("ranks      %d, priority %d, restarts %d of %d%s\n", j.world_size(), j.priority(),
              j.restarts(), j.max_restarts(), j.cancel_requested() ? ", cancel requested" : "");
  if (j.regroups() > 0 ||
      (j.current_world_size() > 0 && j.current_world_size() != j.world_size())) {
    // An elastic job: world_size above is the nominal size, which sets the global batch.
    std::printf("elastic    %d ranks now, regroups %d\n", j.current_world_size(), j.regroups());
  }
  const auto& m = j.last_step();
  if (m.step() > 0) {
    std::printf("progress   step %lld/%lld, loss %s, %s samples/s, ETA %s, rank 0 at %s MiB\n",
                static_cast<long long>(m.step()), static_cast<long long>(m.total_steps()),
                Fixed(m.loss(), 4).c_str(), Fixed(m.samples_per_second(), 0).c_str(),
                FormatDuration(m.eta_seconds()).c_str(),
                Fixed(static_cast<double>(m.memory_bytes()) / (1 << 20), 0).c_str());
    std::printf(
        "step time  data %s, forward %s, backward %s, all-reduce wait %s, optimizer %s ms\n",
        Fixed(1e3 * m.data_seconds(), 1).c_str(), Fixed(1e3 * m.forward_seconds(), 1).c_str(),
        Fixed(1e3 * m.backward_seconds(), 1).c_str(),
        Fixed(1e3 * m.allreduce_wait_seconds(), 1).c_str(),
        Fixed(1e3 * m.optimizer_seconds(), 1).c_str());
    const auto mib = [](int64_t bytes) { return Fixed(static_cast<double>(bytes) / (1 << 20), 0); };
    std::printf("tensors    rank 0: %s MiB in tensors, %s MiB at the peak, %s MiB reserved\n",
                mib(m.tensor_memory_allocated_bytes()).c_str(),
                mib(m.tensor_memory_peak_bytes()).c_str(),
                mib(m.tensor_memory_reserved_bytes()).c_str());
  }
  if (j.last_eval().samples() > 0) {
    std::printf("eval       step %lld: loss %s, accuracy %s%%\n",
                static_cast<long long>(j.last_eval().step()),
                Fixed(j.last_eval().loss(), 4).c_str(),
                Fixed(100 * j.last_eval().accuracy(), 2).c_str());
  }
  if (!j.checkpoint().empty()) std::printf("checkpoint %s\n", j.checkpoint().c_str());
  if (j.stragglers_size() > 0) {
    std::string ranks;
    for (int r : j.stragglers()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::printf("stragglers ranks %s\n", ranks.c_str());
  }
  for (const v1::Attempt& a : j.attempts()) {
    std::printf("attempt %d  %s%s%s\n", a.number(), a.ended_ms() ? "ended" : "running",
                a.regrouped() ? " (regrouped)" : "",
                a.end_reason().empty() ? "" : (": " + a.end_reason()).c_str());
    for (const v1::RankPlacement& p : a.ranks()) {
      std::printf("  rank %-3d %s (%s) slot %d\n", p.rank(), p.worker().c_str(), p.host().c_str(),
                  p.slot());
    }
  }
  for (const v1::Diagnosis& d : j.diagnoses()) {
    std::printf("diagnosis  attempt %d: %s\n", d.attempt(), d.message().c_str());
  }
  for (const v1::CollectiveReport& r : j.collectives()) {
    std::printf("collectives attempt %d: %s (trainyard debug %s --collectives)\n", r.attempt(),
                r.verdict().c_str(), j.id().c_str());
  }
}

int Submit(const std::vector<std::string>& args) {
  Flags f(
      "usage: trainyard submit SPEC.yaml [--set path=value]... [--watch] [flags]\n\n"
      "Submits a job to the coordinator and prints its id (the whole job with -o json).\n\nflags:");
  f.Value("set", "", "override one spec field, e.g. --set steps=200 (repeatable)")
      .Switch("watch", "then watch it to the end (the exit code is the final state's)");
  AddConnectFlags(f);
  int code = 0;
  if (!ParseFlags(f, args, 1, &code)) return code;
  StatusOr<Json> spec = LoadSpecJson(f.positional()[0], f.All("set"));
  if (!spec.ok()) return CommandError(std::string(spec.status().message()), 2);
  StatusOr<std::unique_ptr<ServiceClient>> client = ConnectWith(f);
  if (!client.ok()) return CommandError(std::string(client.status().message()), 2);
  StatusOr<v1::Job> job = (*client)->Submit(spec->Dump());
  if (!job.ok()) {
    return CommandError(f.positional()[0] + ": " + std::string(job.status().message()),
                        job.status().code() == StatusCode::kInvalidArgument ||
                                job.status().code() == StatusCode::kFailedPrecondition
                            ? 2
                            : 1);
  }
  const bool json = f.Get("output") == "json";
  if (json && !f.On("watch")) std::printf("%s\n", ToJsonText(*job).c_str());
  if (!json) std::printf("%s\n", job->id().c_str());
  std::fflush(stdout);
  if (!f.On("watch")) return 0;
  return WatchToEnd(**client, job->id(), json, false);
}

int List(const std::vector<std::string>& args) {
  Flags f("usage: trainyard list [--state S]... [flags]\n\nLists jobs, newest first.\n\nflags:");
  f.Value("state", "", "only jobs in this state (repeatable): pending, running, failed, ...")
      .Value("limit", "100", "at most this many jobs");
  AddConnectFlags(f);
  int code = 0;
  if (!ParseFlags(f, args, 0, &code)) return code;
  std::vector<v1::JobState> states;
  for (const std::string& s : f.All("state")) {
    StatusOr<v1::JobState> state = ParseState(s);
    if (!state.ok()) return CommandError(std::string(state.status().message()), 2);
    states.push_back(*state);
  }
  StatusOr<int64_t> limit = f.Int("limit", 1, 1000000);
  if (!limit.ok()) return CommandError(std::string(limit.status().message()), 2);
  StatusOr<std::unique_ptr<ServiceClient>> client = ConnectWith(f);
  if (!client.ok()) return CommandError(std::string(client.status().message()), 2);
  std::vector<v1::Job> jobs;
  std::string token;
  do {
    const int page =
        static_cast<int>(std::min<int64_t>(1000, *limit - static_cast<int64_t>(jobs.size())));
    StatusOr<v1::ListJobsResponse> resp = (*client)->ListJobs(states, page, token);
    if (!resp.ok())
      return CommandError(std::string(resp.status().message()), CodeFor(resp.status()));
    jobs.insert(jobs.end(), resp->jobs().begin(), resp->jobs().end());
    token = resp->next_page_token();
  } while (!token.empty() && static_cast<int64_t>(jobs.size()) < *limit);
  if (f.Get("output") == "json") {
    v1::ListJobsResponse all;
    for (v1::Job& j : jobs) *all.add_jobs() = std::move(j);
    std::printf("%s\n", ToJsonText(all).c_str());
    return 0;
  }
  std::printf("%-28s %-11s %9s %9s %8s %5s\n", "JOB", "STATE", "STEP", "LOSS", "AGE", "RESTARTS");
  for (const v1::Job& j : jobs) PrintJobLine(j);
  return 0;
}

int OneJob(const std::string& command, const std::vector<std::string>& args) {
  Flags f(command == "describe"
              ? "usage: trainyard describe JOB [flags]\n\nShows a job: state, attempts, ranks "
                "and hosts, last metrics, diagnoses, collective reports.\n\nflags:"
          : command == "watch"
              ? "usage: trainyard watch JOB [flags]\n\nFollows a job to its end with a progress "
                "bar; exits 0 if it SUCCEEDED, 1 if it FAILED, 3 if CANCELLED.\n\nflags:"
              : "usage: trainyard cancel JOB [--checkpoint] [flags]\n\nCancels a job: its ranks "
                "stop (after a checkpoint at a common step with --checkpoint).\n\nflags:");
  if (command == "cancel") f.Switch("checkpoint", "save a checkpoint before stopping");
  if (command == "watch") {
    f.Switch("steps",
             "also print every step's metrics as a line on stdout (with -o json, "
             "every event already is one)");
  }
  AddConnectFlags(f);
  int code = 0;
  if (!ParseFlags(f, args, 1, &code)) return code;
  StatusOr<std::unique_ptr<ServiceClient>> client = ConnectWith(f);
  if (!client.ok()) return CommandError(std::string(client.status().message()), 2);
  const std::string& id = f.positional()[0];
  const bool json = f.Get("output") == "json";
  if (command == "watch") return WatchToEnd(**client, id, json, false, f.On("steps"));
  StatusOr<v1::Job> job =
      command == "describe" ? (*client)->GetJob(id) : (*client)->Cancel(id, f.On("checkpoint"));
  if (!job.ok()) return CommandError(std::string(job.status().message()), CodeFor(job.status()));
  if (json) {
    std::printf("%s\n", ToJsonText(*job).c_str());
  } else if (command == "describe") {
    Describe(*job);
  } else {
    std::printf("%s: %s%s\n", job->id().c_str(), StateName(job->state()).c_str(),
                job->cancel_requested() && job->state() != v1::CANCELLED ? ", cancelling" : "");
  }
  return 0;
}

int Workers(const std::vector<std::string>& args) {
  Flags f("usage: trainyard workers [flags]\n\nLists the registered workers.\n\nflags:");
  AddConnectFlags(f);
  int code = 0;
  if (!ParseFlags(f, args, 0, &code)) return code;
  StatusOr<std::unique_ptr<ServiceClient>> client = ConnectWith(f);
  if (!client.ok()) return CommandError(std::string(client.status().message()), 2);
  StatusOr<std::vector<v1::WorkerInfo>> workers = (*client)->ListWorkers();
  if (!workers.ok())
    return CommandError(std::string(workers.status().message()), CodeFor(workers.status()));
  v1::ListWorkersResponse all;
  for (const v1::WorkerInfo& w : *workers) *all.add_workers() = w;
  if (f.Get("output") == "json") {
    std::printf("%s\n", ToJsonText(all).c_str());
    return 0;
  }
  // GPUS: how many and which ("2 x NVIDIA H200"); a GPU worker's slots for cuda jobs are its
  // GPUs, its SLOTS those of CPU jobs.
  auto gpus = [](const v1::WorkerInfo& w) {
    if (w.gpus_size() == 0) return std::string("-");
    return std::to_string(w.gpus_size()) + " x " + w.gpus(0).name();
  };
  std::printf("%-20s %-16s %-6s %5s %-22s %4s %s\n", "WORKER", "HOST", "ALIVE", "SLOTS", "GPUS",
              "USED", "METRICS");
  for (const v1::WorkerInfo& w : *workers) {
    std::printf("%-20s %-16s %-6s %5d %-22s %4d %s\n", w.name().c_str(), w.host().c_str(),
                w.alive() ? "yes" : "no", w.cpu_slots(), gpus(w).c_str(), w.slots_in_use(),
                w.metrics_address().c_str());
  }
  return 0;
}

}  // namespace

bool ParseFlags(Flags& f, const std::vector<std::string>& args, int positionals, int* code) {
  if (std::optional<int> end = f.ParseOrExit(args, "trainyard", positionals)) {
    *code = *end;
    return false;
  }
  if (f.Get("output") != "text" && f.Get("output") != "json") {
    *code = CommandError("-o takes json or text, not \"" + f.Get("output") + "\"", 2);
    return false;
  }
  return true;
}

int CommandError(const std::string& message, int code) {
  std::fprintf(stderr, "trainyard: error: %s\n", message.c_str());
  return code;
}

int CodeFor(const Status& s) { return s.code() == StatusCode::kInvalidArgument ? 2 : 1; }

void AddConnectFlags(Flags& f) {
  rpc::AddCallerFlags(f);
  f.Value("output", "text", "text or json").Alias("-o", "output");
}

ConnectOptions ReadConnectFlags(const Flags& f) {
  ConnectOptions o;
  static_cast<rpc::CallerOptions&>(o) = rpc::ReadCallerFlags(f);
  return o;
}

int WatchToEnd(ServiceClient& client, const std::string& id, bool json, bool quiet, bool steps) {
  WatchPrinter printer(json, quiet, steps);
  Status s = client.Watch(id, [&](const v1::JobEvent& e) {
    printer.Print(e);
    return true;
  });
  printer.Close();
  if (!s.ok()) return CommandError("watching " + id + ": " + std::string(s.message()), 1);
  return ExitCodeOf(printer.state());
}

int RunServiceCommand(const std::string& command, const std::vector<std::string>& args) {
  if (command == "submit") return Submit(args);
  if (command == "list") return List(args);
  if (command == "workers") return Workers(args);
  if (command == "debug") return RunDebugCommand(args);
  return OneJob(command, args);
}

}  // namespace trainyard::client
