// The fence of a checkpoint directory: the highest attempt of the job that may still commit
// checkpoints there, so that two attempts of one job (a worker partitioned away keeps its
// ranks of attempt N running while the coordinator starts attempt N + 1 elsewhere) never both
// commit.
//
// Note [Checkpoint fence]: the job's attempt number (Attempt.number, TRAINYARD_ATTEMPT) is its
// epoch. The fence is the file <dir>/.epoch, holding one decimal attempt number and a newline.
//   - Raise: rank 0 of attempt N, when it starts and before it resumes the newest checkpoint,
//     takes flock(LOCK_EX) on the file, reads it and writes N in place (never a rename, which
//     would swap the inode others lock) and fsyncs it and <dir>. The fence is never lowered:
//     a file holding M > N means attempt N is stale, and it fails at once naming both.
//   - Commit: the rename of a checkpoint's temporary directory to step-* (and the pruning of
//     old ones) runs under flock(LOCK_SH) on the file, and only while the fence is not above
//     the writer's attempt; otherwise it is refused (FailedPrecondition naming the step, the
//     directory, the attempt and the fence) and nothing named step-* changes.
// Since attempt N + 1 raises the fence before it reads the newest checkpoint, every checkpoint
// it resumes was committed before the raise, and no commit of attempt N lands after it.
// A number only grows, so writing it in place never shortens the file (no truncation needed).
// Epoch 0 (`trainyard train`, no attempt) neither reads nor writes a fence: runs outside the
// service behave as before. flock works across NFS clients on Linux (emulated with fcntl
// locks since 2.6.12); a directory shared by other means must offer it too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace trainyard::trainer {

inline constexpr const char* kFenceFile = ".epoch";

// The fence of `dir`: 0 when it has no fence file (or an empty one). DataLoss naming the file
// when it holds anything but a number.
StatusOr<int64_t> ReadFence(const std::string& dir);

// One writer's view of a directory's fence. Thread-compatible; the file lock is per open file,
// so two CheckpointFences (processes or threads) exclude each other.
class CheckpointFence {
 public:
  // `epoch` 0: no fence (Raise and Commit only run what they are given). `lock_timeout`
  // bounds each wait for the file lock (DeadlineExceeded naming the file).
  CheckpointFence(std::string dir, int64_t epoch,
                  std::chrono::milliseconds lock_timeout = std::chrono::seconds(60));

  // Raises the fence to epoch (creating the directory and the file). FailedPrecondition when
  // it is already above: "attempt 1 is stale: <dir> is fenced at attempt 2 ...".
  Status Raise() const;

  // Runs `commit` under the shared lock when the fence is not above epoch, and returns its
  // status; else FailedPrecondition "checkpoint <what> of attempt 1 refused: <dir> is fenced
  // at attempt 2" without running it.
  Status Commit(const std::string& what, const std::function<Status()>& commit) const;

  int64_t epoch() const { return epoch_; }

 private:
  std::string dir_;
  std::string path_;
  int64_t epoch_;
  std::chrono::milliseconds lock_timeout_;
};

}  // namespace trainyard::trainer
