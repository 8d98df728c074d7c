// trainyard: the command-line client. `train` runs on this machine without the service (in
// one process, or as several with --nproc); the other commands talk to a coordinator, and
// `local` runs the service itself on this machine; `plot` draws a run's metrics file.
#include <cstdio>
#include <string>
#include <vector>

#include "client/plot.h"
#include "client/train_command.h"
#ifdef TY_HAVE_SERVICE
#include "client/service_commands.h"
#endif

namespace {

constexpr const char* kVersion = "0.1.0";

constexpr const char* kHelp =
    "trainyard: train models with Trainyard\n"
    "\n"
    "usage: trainyard <command> [arguments]   (trainyard <command> --help for each)\n"
    "\n"
    "commands:\n"
    "  train SPEC.yaml      train on this machine without the service: in this process,\n"
    "                       or as N with --nproc N\n"
    "  local SPEC.yaml      run the service here (a coordinator and --workers N worker\n"
    "                       daemons on loopback), train the job and watch it to the end\n"
    "  submit SPEC.yaml     submit a job to the coordinator (--coordinator, TLS, --token)\n"
    "  list                 list jobs\n"
    "  describe JOB         a job's state, attempts, ranks, metrics and diagnoses\n"
    "  watch JOB            follow a job with a progress bar until it ends\n"
    "  cancel JOB           cancel a job (--checkpoint saves one first)\n"
    "  workers              list the registered workers\n"
    "  debug JOB            with --collectives: which rank a hung job's ranks wait for,\n"
    "                       and each rank's collective, phase and step\n"
    "  plot RUN             draw a run's loss (or --metric NAME) against the step as SVG\n"
    "  version              print the version\n"
    "  help                 print this help\n"
    "\n"
    "The service commands read TRAINYARD_COORDINATOR, TRAINYARD_TOKEN, TRAINYARD_CA_CERT,\n"
    "TRAINYARD_CERT and TRAINYARD_KEY; -o json prints JSON for scripts.\n";

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
  if (command == "plot") return trainyard::client::RunPlotCommand(args);
  if (command == "version" || command == "--version") {
    std::printf("trainyard %s\n", kVersion);
    return 0;
  }
#ifdef TY_HAVE_SERVICE
  if (command == "local") return trainyard::client::RunLocalCommand(args);
  for (const char* c : {"submit", "list", "describe", "watch", "cancel", "workers", "debug"}) {
    if (command == c) return trainyard::client::RunServiceCommand(command, args);
  }
#endif
  std::fprintf(stderr,
               "trainyard: error: unknown command \"%s\"; commands: train, local, submit, list, "
               "describe, watch, cancel, workers, debug, plot, version, help\n",
               command.c_str());
  return 2;
}
