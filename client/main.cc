// trainyard: the command-line client. Today it trains on one machine (`train`, in one process
// or as several with --nproc); the service commands (submit, list, describe, watch, cancel,
// local) arrive with the service.
#include <cstdio>
#include <string>
#include <vector>

#include "client/train_command.h"

namespace {

constexpr const char* kVersion = "0.1.0";

constexpr const char* kHelp =
    "trainyard: train models with Trainyard\n"
    "\n"
    "usage: trainyard <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  train SPEC.yaml   train on this machine: in this process, or as N with --nproc N\n"
    "                    (trainyard train --help)\n"
    "  version           print the version\n"
    "  help              print this help\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kHelp, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "train") return trainyard::client::RunTrainCommand(args);
  if (command == "version" || command == "--version") {
    std::printf("trainyard %s\n", kVersion);
    return 0;
  }
  std::fprintf(stderr, "trainyard: error: unknown command \"%s\"; commands: train, version, help\n",
               command.c_str());
  return 2;
}
