// `trainyard train SPEC [-o json] [--set path=value]... [--quiet]`: one training run in this
// process (no service), with a live progress line on stderr and a summary at the end.
#pragma once

#include <string>
#include <vector>

namespace trainyard::client {

// Runs the command on its arguments (those after "train") and returns the exit code:
// 0 done, 1 the run failed, 2 bad usage or an invalid spec, 130 / 143 stopped by SIGINT /
// SIGTERM (after saving a checkpoint when the spec has checkpoint.dir).
int RunTrainCommand(const std::vector<std::string>& args);

}  // namespace trainyard::client
