#include "client/debug_command.h"

#include <cstdio>
#include <ctime>

#include "client/service_commands.h"
#include "client/watch_printer.h"

namespace trainyard::client {
namespace {

constexpr const char* kUsage =
    "usage: trainyard debug JOB --collectives [--attempt N] [flags]\n\n"
    "Prints what the coordinator knows about a job's ranks. --collectives: the latest\n"
    "collective report (made when a rank waits in a collective for half the job's hang\n"
    "timeout while another rank is missing from it, and at every hang): which rank is missing\n"
    "from which collective, and one row per rank: its state (waiting, missing, silent, ahead,\n"
    "exited), the collective it is in or last issued (SEQ, OP, SIZE), its phase and step, and\n"
    "for how long (FOR). -o json prints the report itself.\n\nflags:";

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string Size(int64_t numel, const std::string& dtype) {
  if (numel <= 0) return "-";
  return std::to_string(numel) + " " + dtype;
}

std::string UtcTime(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// The report of `attempt` (0: the latest); null when there is none.
const v1::CollectiveReport* ReportOf(const v1::Job& job, int64_t attempt) {
  for (int i = job.collectives_size() - 1; i >= 0; --i) {
    if (attempt == 0 || job.collectives(i).attempt() == attempt) return &job.collectives(i);
  }
  return nullptr;
}

}  // namespace

std::string CollectiveTable(const v1::CollectiveReport& r) {
  std::string out = "attempt " + std::to_string(r.attempt()) + ", " + UtcTime(r.time_ms()) +
                    (r.hang() ? ", at the hang verdict" : ", while ranks wait") + "\n" +
                    r.verdict() + "\n\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-5s %-14s %-8s %6s %-15s %-18s %-15s %7s %8s\n", "RANK",
                "WORKER", "STATE", "SEQ", "OP", "SIZE", "PHASE", "STEP", "FOR");
  out += line;
  for (const v1::CollectiveRow& row : r.rows()) {
    std::snprintf(line, sizeof(line), "%-5d %-14s %-8s %6lld %-15s %-18s %-15s %7lld %8s\n",
                  row.rank(), row.worker().c_str(), row.state().c_str(),
                  static_cast<long long>(row.seq()), row.op().empty() ? "-" : row.op().c_str(),
                  Size(row.numel(), row.dtype()).c_str(), row.phase().c_str(),
                  static_cast<long long>(row.step()), Seconds(row.seconds()).c_str());
    out += line;
  }
  return out;
}

int RunDebugCommand(const std::vector<std::string>& args) {
  Flags f(kUsage);
  f.Switch("collectives", "the latest collective report, as a table")
      .Value("attempt", "0", "that attempt's report instead of the latest");
  AddConnectFlags(f);
  int code = 0;
  if (!ParseFlags(f, args, 1, &code)) return code;
  if (!f.On("collectives")) {
    return CommandError("debug: say what to show: --collectives (trainyard debug --help)", 2);
  }
  StatusOr<int64_t> attempt = f.Int("attempt", 0, 1 << 30);
  if (!attempt.ok()) return CommandError(std::string(attempt.status().message()), 2);
  StatusOr<std::unique_ptr<ServiceClient>> client = ServiceClient::Connect(ReadConnectFlags(f));
  if (!client.ok()) return CommandError(std::string(client.status().message()), 2);
  const std::string& id = f.positional()[0];
  StatusOr<v1::Job> job = (*client)->GetJob(id);
  if (!job.ok()) return CommandError(std::string(job.status().message()), CodeFor(job.status()));
  const v1::CollectiveReport* report = ReportOf(*job, *attempt);
  if (report == nullptr) {
    return CommandError("job " + id + " has no collective report" +
                            (*attempt ? " of attempt " + std::to_string(*attempt) : "") +
                            ": no rank has waited in a collective for half the hang timeout "
                            "while another was missing from it",
                        1);
  }
  if (f.Get("output") == "json") {
    std::printf("%s\n", ToJsonText(*report).c_str());
  } else {
    std::printf("job %s: %s", id.c_str(), CollectiveTable(*report).c_str());
  }
  return 0;
}

}  // namespace trainyard::client
