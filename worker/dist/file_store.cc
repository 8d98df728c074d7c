// FileStore (OpenFileStore in store.h).
//
// Note [FileStore layout]
// Key k lives in file "k" + escape(k), where escape keeps [A-Za-z0-9_-] and writes every other
// byte as %XX, so keys with '/' or ".." stay inside the directory and never collide. Writers
// write ".tmp.*" and rename(2) it over the key's file, so a reader sees all of a value or
// nothing. Add holds flock(2) on ".lock" around its read-modify-write.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <sstream>
#include <thread>

#include "worker/dist/store.h"
#include "worker/dist/store_internal.h"

namespace trainyard::dist {
namespace {

using std::chrono::milliseconds;
using store_internal::Clock;
using store_internal::kIoGrace;
using store_internal::Left;
using store_internal::ParseInt;
using store_internal::Quote;
using store_internal::QuoteList;

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  std::string PathOf(const std::string& key) const {
    static const char kHex[] = "0123456789ABCDEF";
    std::string name = "k";
    for (unsigned char ch : key) {
      if (std::isalnum(ch) || ch == '_' || ch == '-') {
        name.push_back(static_cast<char>(ch));
      } else {
        name += {'%', kHex[ch >> 4], kHex[ch & 15]};
      }
    }
    return dir_ + "/" + name;
  }
  // The value of `key`: NotFound when unset.
  StatusOr<std::string> Read(const std::string& key) const;
  // Sleeps a little (growing to 20 ms) but never past `deadline`.
  static void Backoff(int* round, Clock::time_point deadline) {
    const milliseconds step(std::min(20, 1 << std::min(*round, 5)));
    ++*round;
    std::this_thread::sleep_for(std::min(step, Left(deadline)));
  }

  const std::string dir_;
};

StatusOr<std::string> FileStore::Read(const std::string& key) const {
  const std::string path = PathOf(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError(key);
    return ErrnoStatus("file store: open " + path);
  }
  std::string value;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) value.append(buf, static_cast<size_t>(n));
  }
  Status st = n < 0 ? ErrnoStatus("file store: read " + path) : OkStatus();
  ::close(fd);
  if (!st.ok()) return st;
  return value;
}

Status FileStore::Set(const std::string& key, const std::string& value) {
  static std::atomic<uint64_t> counter{0};
  std::ostringstream tmp;
  tmp << dir_ << "/.tmp." << ::getpid() << "."
      << std::hash<std::thread::id>()(std::this_thread::get_id()) << "." << counter++;
  const std::string tmp_path = tmp.str();
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("file store: create " + tmp_path);
  size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = ErrnoStatus("file store: write " + tmp_path);
      ::close(fd);
      ::unlink(tmp_path.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  const std::string path = PathOf(key);
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    Status st = ErrnoStatus("file store: rename to " + path);
    ::unlink(tmp_path.c_str());
    return st;
  }
  return OkStatus();
}

StatusOr<std::string> FileStore::Get(const std::string& key, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (int round = 0;; Backoff(&round, deadline)) {
    StatusOr<std::string> v = Read(key);
    if (v.ok() || v.status().code() != StatusCode::kNotFound) return v;
    if (Clock::now() >= deadline) {
      return DeadlineExceededError("file store " + dir_ + ": key " + Quote(key) +
                                   " was not set within " + FormatDuration(timeout));
    }
  }
}

Status FileStore::Wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (int round = 0;; Backoff(&round, deadline)) {
    std::vector<std::string> missing;
    for (const std::string& k : keys) {
      if (::access(PathOf(k).c_str(), F_OK) != 0) missing.push_back(k);
    }
    if (missing.empty()) return OkStatus();
    if (Clock::now() >= deadline) {
      return DeadlineExceededError("file store " + dir_ + ": keys still missing after " +
                                   FormatDuration(timeout) + ": " + QuoteList(missing));
    }
  }
}

StatusOr<int64_t> FileStore::Add(const std::string& key, int64_t delta) {
  const std::string lock_path = dir_ + "/.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("file store: open " + lock_path);
  // Bounded: a holder only ever reads and renames one small file.
  const auto deadline = Clock::now() + kIoGrace;
  for (int round = 0; ::flock(fd, LOCK_EX | LOCK_NB) != 0; Backoff(&round, deadline)) {
    if (Clock::now() >= deadline) {
      ::close(fd);
      return DeadlineExceededError("file store " + dir_ + ": add to " + Quote(key) +
                                   ": could not lock " + lock_path + " within " +
                                   FormatDuration(kIoGrace));
    }
  }
  int64_t sum = delta;
  StatusOr<std::string> cur = Read(key);
  Status st;
  if (cur.ok()) {
    int64_t v = 0;
    if (!ParseInt(*cur, &v)) {
      st = InvalidArgumentError("file store " + dir_ + ": add to " + Quote(key) +
                                ": it holds a value that is not an integer");
    } else if (__builtin_add_overflow(v, delta, &sum)) {
      st = InvalidArgumentError("file store " + dir_ + ": add to " + Quote(key) + ": it holds " +
                                std::to_string(v) + "; adding " + std::to_string(delta) +
                                " would overflow a 64-bit integer; use a new key");
    }
  } else if (cur.status().code() != StatusCode::kNotFound) {
    st = cur.status();
  }
  if (st.ok()) st = Set(key, std::to_string(sum));
  ::flock(fd, LOCK_UN);
  ::close(fd);
  if (!st.ok()) return st;
  return sum;
}

}  // namespace

StatusOr<std::shared_ptr<Store>> OpenFileStore(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return FailedPreconditionError("file store: cannot create directory " + dir + ": " +
                                   (ec ? ec.message() : "not a directory"));
  }
  return std::shared_ptr<Store>(new FileStore(dir));
}

}  // namespace trainyard::dist
