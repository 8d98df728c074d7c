// Verdicts about the ranks of one running attempt, from their progress reports: a hung rank
// (FindHang) and stragglers (StragglerDetector). Pure logic, no clock: ages come in the reports.
//
// Note [Naming a hung rank]: in data parallelism every rank waits in each collective until the
// last one arrives, so a rank that stops (SIGSTOP, a deadlock, a dead disk) leaves the others
// waiting in collective #n. The waiters still report (their reporting thread runs) and say how
// long their oldest unfinished collective has waited. A rank is named hung when, while some
// clearly alive rank (reported within half the timeout, at most 10 s) has waited longer than
// the hang timeout, it is not waiting with them and either its reports stopped for the timeout
// (a stopped process) or it stayed in one phase, outside any collective, for the timeout (a
// stuck loader, a deadlock). A rank that stops while it waits itself looks like a waiter until
// its reports are stale, so waiters must be fresh, not merely unexpired. Evaluation and
// checkpointing are progress: only rank 0 evaluates while the others wait for it.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

struct RankView {
  trainyard::v1::RankPlacement placement;
  trainyard::v1::RankStatus status;  // the last report (report_age_ms kept current by the caller)
  bool reported = false;             // any report yet
};

// "5.2 s": how the coordinator's verdicts and reasons write a duration.
std::string FormatSeconds(double seconds);

// The hung rank of `ranks` by Note [Naming a hung rank], or nullopt. The diagnosis names the
// rank, its worker and host, its last phase and step, and the collective the others wait in.
std::optional<trainyard::v1::Diagnosis> FindHang(const std::vector<RankView>& ranks,
                                                 double hang_timeout_seconds);

// Flags ranks whose mean compute time per step (the step without its all-reduce wait) over the
// last `window` steps is above factor x the median of the other ranks' means; a flag clears when the
// rank drops below. Needs every rank to have a full window. A rank must also be at least
// kMinExcessSeconds slower: steps of a few milliseconds vary by multiples from noise alone.
class StragglerDetector {
 public:
  StragglerDetector(int world_size, double factor, int window)
      : world_size_(world_size), factor_(factor), window_(window) {}

  void AddStep(int rank, double compute_seconds);
  // Ranks whose flag changed since the last call: (rank, now flagged, its mean, the median).
  struct Change {
    int rank;
    bool flagged;
    double mean_seconds;
    double median_seconds;
  };
  std::vector<Change> Update();
  std::vector<int> Flagged() const;

  static constexpr double kMinExcessSeconds = 0.02;

 private:
  int world_size_;
  double factor_;
  size_t window_;
  std::map<int, std::deque<double>> steps_;
  std::map<int, bool> flagged_;
};

}  // namespace trainyard::server
