// `trainyard train SPEC [-o json] [--set path=value]... [--quiet] [--nproc N]`: one training
// run on this machine (no service), with a live progress line on stderr and a summary at the
// end. One process trains in this one; N > 1 are launched as N ranks (client/launch.h), and
// a process started with TRAINYARD_RANK set is one of them.
#pragma once

#include <string>
#include <vector>

namespace trainyard::client {

// Runs the command on its arguments (those after "train") and returns the exit code:
// 0 done, 1 the run failed (with N ranks: the first failing rank's code), 2 bad usage or an
// invalid spec, 130 / 143 stopped by SIGINT / SIGTERM (after saving a checkpoint when the
// spec has checkpoint.dir).
int RunTrainCommand(const std::vector<std::string>& args);

}  // namespace trainyard::client
