// The CLI's service commands: submit, list, describe, watch, cancel, workers and debug
// (debug_command.h) talk to a coordinator; local runs one on this machine with its workers
// (local_command.cc).
#pragma once

#include <string>
#include <vector>

#include "client/service_client.h"
#include "common/flags.h"

namespace trainyard::client {

// Runs `command` ("submit", ...) on its arguments; returns the exit code. Nonzero: 1 a call
// failed, 2 bad usage or a rejected spec; watch also 1 for a FAILED job, 3 for CANCELLED.
int RunServiceCommand(const std::string& command, const std::vector<std::string>& args);
int RunLocalCommand(const std::vector<std::string>& args);

// Declares rpc::AddCallerFlags's flags and -o/--output; and reads them.
void AddConnectFlags(Flags& f);
ConnectOptions ReadConnectFlags(const Flags& f);

// Parses a command's flags (Flags::ParseOrExit with -o checked): false, with *code set, when
// the command ends here (help, bad usage).
bool ParseFlags(Flags& f, const std::vector<std::string>& args, int positionals, int* code);

// Prints `message` as "trainyard: error: ..." and returns `code`.
int CommandError(const std::string& message, int code);
// The exit code for a failed call: 2 for InvalidArgument, 1 otherwise.
int CodeFor(const Status& s);

// Watches `id` to its end, printing as WatchPrinter does; returns ExitCodeOf(final state) or 1
// when the watch failed.
int WatchToEnd(ServiceClient& client, const std::string& id, bool json, bool quiet,
               bool steps = false);

}  // namespace trainyard::client
