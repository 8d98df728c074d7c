#include "common/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace trainyard {
namespace {

// Closes fd on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  // Closes now, reporting the error (close can report a failed delayed write).
  Status Close(const std::string& path) {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? OkStatus() : ErrnoStatus("closing \"" + path + "\"");
  }

 private:
  int fd_;
};

// Creates or truncates `path` and writes `bytes`, then fsyncs it when `sync`.
Status WriteFile(const std::string& path, const std::string& bytes, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("creating \"" + path + "\"");
  FdCloser closer(fd);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("writing \"" + path + "\"");
    done += static_cast<size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) return ErrnoStatus("syncing \"" + path + "\"");
  return closer.Close(path);
}

}  // namespace

Status WriteFileSynced(const std::string& path, const std::string& bytes) {
  return WriteFile(path, bytes, /*sync=*/true);
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening directory \"" + dir + "\" to sync it");
  FdCloser closer(fd);
  if (::fsync(fd) != 0 && errno != EINVAL) {
    return ErrnoStatus("syncing directory \"" + dir + "\"");
  }
  return closer.Close(dir);
}

Status ReplaceFile(const std::string& path, const std::string& tmp,
                   const std::function<Status(const std::string& tmp)>& write) {
  Status s = write(tmp);
  if (s.ok()) {
    const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) s = ErrnoStatus("syncing \"" + tmp + "\"");
    if (fd >= 0) ::close(fd);
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus("renaming \"" + tmp + "\" to \"" + path + "\"");
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  const size_t slash = path.rfind('/');
  return SyncDirectory(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
}

Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  Status s =
      ReplaceFile(path, path + ".tmp-" + std::to_string(::getpid()),
                  [&](const std::string& tmp) { return WriteFile(tmp, bytes, /*sync=*/false); });
  if (s.code() == StatusCode::kNotFound) {
    return NotFoundError("writing \"" + path + "\": " + std::string(s.message()));
  }
  return s;
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening \"" + path + "\"");
  FdCloser closer(fd);
  std::string out;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("reading \"" + path + "\"");
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace trainyard
