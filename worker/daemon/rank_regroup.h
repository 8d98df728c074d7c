// RankGroup: a rank process's current process group, and for an elastic job the regroups the
// daemon asks for through the command pipe (kCommandFdEnv; rank_supervisor.h writes the lines).
//
// A reader thread takes each {"type":"regroup","attempt":A,...} line with A above the current
// attempt as the pending regroup; at_step_boundary false (a member is lost) aborts the current
// group at once, so that a rank blocked in a collective with the lost peer gets out; true sets
// requested(), which the Trainer reads after each step (TrainerOptions::regroup_requested).
// The training thread then calls Leave (from TrainerOptions::regroup): it reports
// `regrouping` and waits for the pending regroup, joins, and calls Joined. The progress
// reporter reads group() and the regrouping fields from its own thread. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "worker/dist/process_group.h"

namespace trainyard::daemon {

// Where a rank is in its job: attempt (the store scope and fence epoch), secret, rank, size.
struct GroupPlace {
  int attempt = 0;
  std::string secret;
  int rank = 0;
  int world_size = 1;
};

class RankGroup {
 public:
  // `fd`: the command pipe's read end, or -1 (no regroups: a job that is not elastic).
  // `wait`: how long Leave waits for the daemon's regroup.
  RankGroup(GroupPlace place, int fd, std::chrono::milliseconds wait);
  ~RankGroup();  // stops the reader thread
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  // The group the progress reporter watches (null: none yet).
  std::shared_ptr<dist::ProcessGroup> group() const;
  void SetGroup(std::shared_ptr<dist::ProcessGroup> group);
  GroupPlace place() const;

  // Set while a regroup at a step boundary (members join) is pending.
  const std::atomic<bool>* requested() const { return &requested_; }

  // This rank left its group because of `why` (OK: asked to): reports `regrouping` and waits
  // for a pending regroup to an attempt later than the current one and than `after` (a regroup
  // whose group could not be joined). DeadlineExceeded naming what it waited for.
  StatusOr<GroupPlace> Leave(const Status& why, int after = 0);
  // The rank joined `group` at `place`: `regrouping` clears, the old group is retired.
  void Joined(GroupPlace place, std::shared_ptr<dist::ProcessGroup> group);

  // For status lines: whether the rank left its group, and why; the attempt of that group
  // (place().attempt, or a later one it could not join), else of the group it is in.
  bool regrouping(std::string* why) const;
  int group_attempt() const;
  // Whether a regroup to an attempt later than `attempt` is pending (a join of `attempt` is
  // then pointless).
  bool Superseded(int attempt) const;

  // One command line (the reader thread's work; public for tests).
  void OnCommand(const std::string& line);

 private:
  void ReadCommands();

  const int fd_;
  const std::chrono::milliseconds wait_;
  std::atomic<bool> requested_{false};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  GroupPlace place_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::optional<GroupPlace> pending_;
  bool regrouping_ = false;
  int left_ = 0;  // the attempt whose group it left (Leave)
  std::string why_;
  std::thread reader_;
};

}  // namespace trainyard::daemon
