// The cross-rank collective report: which rank is missing from the collective the others wait
// in, and what every rank is doing instead. Pure logic over the ranks' last reports (RankView,
// health.h), like FindHang; the Coordinator decides when to make one (coordinator_collectives.cc).
//
// Note [Collective flight recorder]
// Every rank keeps a ring of its last 64 collectives: sequence number, op, size, state, times
// and the trainer's phase when it was issued (worker/dist/flight_recorder.h). While one of them
// has been unfinished for 1 s or more, or one failed, the rank adds its last 16 to its
// half-second status line and its worker forwards them in RankStatus.collectives
// (worker/daemon/flight_report.h); healthy heartbeats carry none. A stopped rank (SIGSTOP) sends
// nothing more, but its last report still says how far it got (collectives_issued and _done,
// phase, step). From these BuildCollectiveReport finds
//   - the collective: the lowest sequence number S that a reporting rank has issued and not
//     completed (in data parallelism every rank issues the same collectives in the same order,
//     so S is where the ranks stopped agreeing);
//   - each rank's state: "waiting" (issued S, not completed, still reporting), "missing" (still
//     reporting, never issued S: it is elsewhere, and its phase says where), "silent" (no report
//     for silent_after_ms: stopped or dead; its last report says what it was doing), "ahead"
//     (completed S), "exited";
//   - the culprits: the missing and silent ranks. The verdict names each with its worker, host,
//     phase, step and for how long, then the ranks that wait and for how long. When every rank
//     issued S the verdict says so (a network fault, or a rank stuck inside the collective), and
//     when the waiting ranks' records of S differ in op or size it names them: they issued
//     collectives in different orders.
// The Coordinator makes a report early, once a rank has waited in S for half the hang timeout
// and a culprit is named (a silent rank, or a missing one outside evaluate, checkpoint and
// starting, where the others legitimately wait), so the rank is named within the hang timeout;
// again when a missing culprit falls silent; and with every HANG diagnosis. It keeps the latest
// of each attempt in Job.collectives and emits each as a JobEvent; `trainyard describe` prints
// its verdict and `trainyard debug JOB --collectives` its table (docs/operations.md, "Hangs: the
// collective flight recorder").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/health.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

// The report over `ranks` (ages current, as for FindHang), or nullopt when no reporting rank
// is inside a collective. A rank whose last report is silent_after_ms old or older counts as
// silent. attempt, time_ms and hang are left for the caller.
std::optional<trainyard::v1::CollectiveReport> BuildCollectiveReport(
    const std::vector<RankView>& ranks, int64_t silent_after_ms);

// "all_reduce #57 (262144 float32)"; "barrier #3"; "collective #57" when the op is unknown.
std::string CollectiveName(int64_t seq, const std::string& op, int64_t numel,
                           const std::string& dtype);

// How long the report's waiting ranks have waited, at most (seconds; 0 when none waits).
double LongestWait(const trainyard::v1::CollectiveReport& report);

}  // namespace trainyard::server
