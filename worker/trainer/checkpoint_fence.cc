#include "worker/trainer/checkpoint_fence.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/check.h"
#include "common/durable_file.h"

namespace trainyard::trainer {
namespace {

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

// An open fence file, locked; unlocked and closed on destruction.
class LockedFile {
 public:
  LockedFile() = default;
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;
  ~LockedFile() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

  // Opens (creating it when missing) and locks `path` with `op` (LOCK_SH or LOCK_EX), polling
  // every 10 ms for up to `timeout`.
  Status Open(const std::string& path, int flags, int op, std::chrono::milliseconds timeout) {
    path_ = path;
    fd_ = ::open(path.c_str(), flags | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return ErrnoStatus("opening the checkpoint fence " + Quoted(path));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (::flock(fd_, op | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        return ErrnoStatus("locking the checkpoint fence " + Quoted(path));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return DeadlineExceededError("timed out after " + std::to_string(timeout.count()) +
                                     " ms waiting for the lock on the checkpoint fence " +
                                     Quoted(path));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return OkStatus();
  }

  // The number the file holds; 0 when empty.
  StatusOr<int64_t> Read() const {
    std::string text;
    char buf[64];
    for (ssize_t n; (n = ::pread(fd_, buf, sizeof(buf), static_cast<off_t>(text.size()))) != 0;) {
      if (n < 0) return ErrnoStatus("reading the checkpoint fence " + Quoted(path_));
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > 64) break;
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    int64_t value = 0;
    bool ok = text.size() <= 18;
    for (char c : text) {
      if (c < '0' || c > '9') ok = false;
      if (ok) value = value * 10 + (c - '0');
    }
    if (!ok) {
      return DataLossError("checkpoint fence " + Quoted(path_) + " holds " + Quoted(text) +
                           "; it must hold an attempt number. Remove it only when no attempt "
                           "of the job runs");
    }
    return value;
  }

  // Writes `value` at offset 0 and fsyncs. Never shorter than what it overwrites, since the
  // fence only grows (Note [Checkpoint fence]).
  Status Write(int64_t value) const {
    const std::string text = std::to_string(value) + "\n";
    if (::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      return ErrnoStatus("writing the checkpoint fence " + Quoted(path_));
    }
    if (::fsync(fd_) != 0) return ErrnoStatus("syncing the checkpoint fence " + Quoted(path_));
    return OkStatus();
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

StatusOr<int64_t> ReadFence(const std::string& dir) {
  const std::string path = dir + "/" + kFenceFile;
  if (::access(path.c_str(), F_OK) != 0) return int64_t{0};
  LockedFile file;
  RETURN_IF_ERROR(file.Open(path, O_RDONLY, LOCK_SH, std::chrono::seconds(60)));
  return file.Read();
}

CheckpointFence::CheckpointFence(std::string dir, int64_t epoch,
                                 std::chrono::milliseconds lock_timeout)
    : dir_(std::move(dir)),
      path_(dir_ + "/" + kFenceFile),
      epoch_(epoch),
      lock_timeout_(lock_timeout) {
  TY_CHECK(epoch_ >= 0) << "checkpoint fence epoch " << epoch_;
}

Status CheckpointFence::Raise() const {
  if (epoch_ == 0) return OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    errno = ec.value();
    return ErrnoStatus("creating checkpoint directory " + Quoted(dir_));
  }
  LockedFile file;
  RETURN_IF_ERROR(file.Open(path_, O_RDWR, LOCK_EX, lock_timeout_));
  ASSIGN_OR_RETURN(const int64_t fence, file.Read());
  if (fence > epoch_) {
    return FailedPreconditionError("attempt " + std::to_string(epoch_) + " is stale: " + dir_ +
                                   " is fenced at attempt " + std::to_string(fence) +
                                   " (a newer attempt of the job has started; this one may not " +
                                   "resume or write checkpoints)");
  }
  if (fence == epoch_) return OkStatus();
  RETURN_IF_ERROR(file.Write(epoch_));
  return SyncDirectory(dir_);  // the file's entry, when it was just created
}

Status CheckpointFence::Commit(const std::string& what,
                               const std::function<Status()>& commit) const {
  if (epoch_ == 0) return commit();
  LockedFile file;
  RETURN_IF_ERROR(file.Open(path_, O_RDONLY, LOCK_SH, lock_timeout_));
  ASSIGN_OR_RETURN(const int64_t fence, file.Read());
  if (fence > epoch_) {
    return FailedPreconditionError("checkpoint " + what + " of attempt " + std::to_string(epoch_) +
                                   " refused: " + dir_ + " is fenced at attempt " +
                                   std::to_string(fence));
  }
  return commit();
}

}  // namespace trainyard::trainer
