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
//
// Note [A job that makes no progress]: when no rank waits (every rank stopped by SIGSTOP, the
// only rank of a one-rank job stuck, every rank waiting in a collective that never completes)
// the rule above names nobody. So the job is also hung when none of its running ranks has made
// progress for the hang timeout, whatever the world size. A rank makes progress when its phase
// changes (every step runs through data, forward, ...: a completed step is a phase change) or
// a collective of it completes. A rank is quiet when
//   - its reports stopped for the timeout (a stopped process: the reporting thread runs in
//     every phase, from before the rendezvous to the exit), or
//   - it reports but has made no progress for the timeout; in a phase where long silence is
//     legitimate ("starting": the rendezvous, loading data and a checkpoint before the first
//     step; "evaluate"; "checkpoint") for kSlowPhaseFactor times the timeout instead. We chose
//     a longer allowance over excluding those phases: a rank stuck forever in one of them
//     still ends the attempt, only later, where an exclusion would leave the job RUNNING
//     forever.
// The job is hung when every rank that has not exited is quiet. Counting a completed
// collective as progress keeps this rule from firing before the one above, which names the
// culprit. A rank not heard from yet (after a coordinator restart) gives no verdict.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

struct RankView {
  trainyard::v1::RankPlacement placement;
  trainyard::v1::RankStatus status;  // the last report (report_age_ms kept current by the caller)
  bool reported = false;             // any report yet
};

// "5.2 s": how the coordinator's verdicts and reasons write a duration.
std::string FormatSeconds(double seconds);
inline double SecondsOf(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

// "rank 1 on w1 (10.0.0.7)": how reasons and diagnoses name a rank.
std::string RankName(const trainyard::v1::RankPlacement& p);

// The hung rank of `ranks` by Note [Naming a hung rank]; else, when the whole job made no
// progress by Note [A job that makes no progress], a diagnosis of the job; else nullopt. The
// first names the rank, its worker and host, its last phase and step, and the collective the
// others wait in. The second carries the rank quiet the longest in rank, worker, host, phase
// and step, how long the job made no progress in seconds and collective_seq 0; its message
// names every running rank with its worker, last phase and step and how long it was quiet.
// The ages in the views must be current (the caller adds the time since each report).
std::optional<trainyard::v1::Diagnosis> FindHang(const std::vector<RankView>& ranks,
                                                 double hang_timeout_seconds);

// Note [A job that makes no progress]: how many hang timeouts a rank that still reports may
// stay in "starting", "evaluate" or "checkpoint" before it counts as quiet.
inline constexpr double kSlowPhaseFactor = 10;

// Flags ranks whose mean compute time per step (the step without its all-reduce wait) over the
// last `window` steps is above factor x the median of the other ranks' means; a flag clears when
// the rank drops below. Needs every rank to have a full window. A rank must also be at least
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

// Note [Slow links]: a rank behind a slow network link does not compute more slowly, and in a
// ring all-reduce every rank waits as long as the others, so StragglerDetector cannot see it.
// Each rank reports, per peer address, the kernel's round-trip time of its connections that
// carried data in the last half second (worker/ranks/links.h); a congested or capped link
// queues data and its round trips grow by an order of magnitude (on this project's test
// cluster a link capped at 100 Mbit/s: 12-33 ms, against 0.1-4 ms for the others, the upper
// end being the delayed acknowledgements of a busy 2-core host). A node is slow when every
// fresh link to or from it is above factor x the median of the links that do not touch it
// and at least kMinExcessSeconds above it. That takes three or more hosts: with two, the one
// link between them cannot say which end is slow. Links older than kFreshFor are forgotten.
class SlowLinkDetector {
 public:
  explicit SlowLinkDetector(double factor) : factor_(factor) {}

  // A round-trip time measured from host `from` to host `to`, at `now`.
  void Add(const std::string& from, const std::string& to, double rtt_seconds,
           Clock::TimePoint now);
  // Hosts whose flag changed since the last call: (host, now flagged, its links' smallest
  // round trip, the other links' median).
  struct Change {
    std::string host;
    bool flagged;
    double rtt_seconds;
    double others_seconds;
  };
  std::vector<Change> Update(Clock::TimePoint now);
  std::vector<std::string> Flagged() const;

  static constexpr double kMinExcessSeconds = 0.005;
  static constexpr std::chrono::seconds kFreshFor{10};

 private:
  struct Sample {
    double rtt_seconds;
    Clock::TimePoint at;
  };
  double factor_;
  std::map<std::pair<std::string, std::string>, Sample> links_;
  std::map<std::string, bool> flagged_;
};

}  // namespace trainyard::server
