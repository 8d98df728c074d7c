// trainyard debug JOB --collectives: the latest collective report of a job (Note [Collective
// flight recorder] in server/collective_report.h) as a table, one row per rank.
#pragma once

#include <string>
#include <vector>

#include "client/service_client.h"

namespace trainyard::client {

// The report's verdict line and its table:
//   RANK  WORKER  STATE    SEQ  OP          SIZE            PHASE           STEP  FOR
//   0     w0      waiting  57   all_reduce  262144 float32  allreduce_wait  12    4.0 s
std::string CollectiveTable(const v1::CollectiveReport& report);

// Runs `trainyard debug` on its arguments; returns the exit code (0; 1 when the call failed or
// the job has no report; 2 for bad usage).
int RunDebugCommand(const std::vector<std::string>& args);

}  // namespace trainyard::client
