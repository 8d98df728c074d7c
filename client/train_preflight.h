// Checks and preparations of `trainyard train` before any rank starts (train_command.cc).
#pragma once

#include <string>

#include "common/spec/job_spec.h"
#include "common/status.h"

namespace trainyard::client {

// --fresh: moves everything in `dir` (checkpoints, metrics.jsonl, the vocabulary) but earlier
// previous-* folders into a new `dir`/previous-<UTC time>/, so the run starts at step 0 and the
// old one is kept; says so on stderr. Nothing to do for "" or a missing directory.
Status MoveAside(const std::string& dir);

// OK when `nproc` ranks of `spec` fit this machine's memory (UsableMemoryBytes) by
// spec::EstimateRankMemory; else InvalidArgument saying what the job needs and what there is.
Status CheckMemory(const spec::JobSpec& spec, int nproc);

}  // namespace trainyard::client
