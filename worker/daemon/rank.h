// A rank process, as the worker daemon starts it (`trainyard-worker rank`): it reads its place
// from the environment (worker/ranks/env.h), rendezvouses through the coordinator (GrpcStore),
// trains with the Trainer, and writes one JSON line per event to the report pipe the daemon reads:
//   {"type":"status","step":..,"phase":..,"phase_age_ms":..,"issued":..,"done":..,
//    "collective_age_ms":..,"links":[..],"attempt":..,"regrouping":..,"group_error":..}
//    every half second, from its own thread (attempt: of the group it is in, or left when
//    regrouping), with "collectives":[..] while a collective is stuck or failed
//    (flight_report.h)
//   {"type":"step", <StepMetrics fields>}   after each step
//   {"type":"eval", ...} {"type":"checkpoint","dir":..}
// An elastic job's rank also reads regroups from the command pipe (rank_regroup.h).
// Exit codes: 0 done, 1 failed (worth a restart), 2 the job itself is wrong (its spec or
// data; a restart cannot help), 143 stopped by SIGTERM (after a checkpoint when configured).
#pragma once

namespace trainyard::daemon {

// Runs the rank and returns its exit code.
int RunRank();

}  // namespace trainyard::daemon
