// ShmComm's segment (shm_comm.h): the host key, creating or attaching the segment through the
// store, and unlinking it. The collectives are in shm_comm.cc.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

#include "common/random_id.h"
#include "worker/dist/process_group.h"
#include "worker/dist/shm_internal.h"

namespace trainyard::dist::internal {
namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string NamespaceOf(const char* which) {
  struct stat st {};
  const std::string path = std::string("/proc/self/ns/") + which;
  if (::stat(path.c_str(), &st) != 0) return "?";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

std::string Errno(const std::string& what, const std::string& name) {
  return what + " " + name + ": " + std::strerror(errno);
}

// Creates, sizes and maps a fresh segment; the pages are reserved now, so a full /dev/shm is an
// error here rather than a SIGBUS in a collective.
StatusOr<void*> CreateSegment(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return UnavailableError(Errno("could not create", name));
  int err = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (err == 0) err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base =
      err == 0 ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (err == 0 && base == MAP_FAILED) err = errno;
  ::close(fd);
  if (err != 0) {
    ::shm_unlink(name.c_str());
    return UnavailableError("could not size " + name + " to " + std::to_string(bytes >> 20) +
                            " MiB: " + std::strerror(err) + " (is /dev/shm large enough?)");
  }
  return base;
}

StatusOr<void*> AttachSegment(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return UnavailableError(Errno("could not open", name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    return UnavailableError(name + " is not " + std::to_string(bytes) + " bytes long");
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) return UnavailableError("could not map " + name + ": " + strerror(err));
  return base;
}

// Maps the local group's segment: the first rank creates it and publishes its name, the others
// attach. An error names what failed.
StatusOr<void*> MapSegment(Store& store, const std::vector<int>& ranks, int me,
                           const std::string& tag, size_t bytes,
                           std::chrono::milliseconds timeout) {
  const std::string key = "shm/name/" + std::to_string(ranks[0]);
  if (me == 0) {
    RemoveOrphanedSegments();
    const std::string name =
        "/trainyard-" + tag + "-" + std::to_string(::getpid()) + "-" + RandomHex(12);
    auto base = CreateSegment(name, bytes);
    if (base.ok()) {  // ready before anyone can open it by name
      auto* header = new (*base) ShmHeader();
      header->size = static_cast<int32_t>(ranks.size());
      header->magic = kShmMagic;
    }
    Status published = store.Set(key, base.ok() ? name : "!" + base.status().message());
    if (!published.ok() && base.ok()) {
      ::munmap(*base, bytes);
      ::shm_unlink(name.c_str());
    }
    if (!published.ok()) return published;
    return base;
  }
  StatusOr<std::string> published = store.Get(key, timeout);
  if (!published.ok()) return published.status();
  const std::string name = *published;
  if (name.empty() || name[0] != '/') {
    return UnavailableError("rank " + std::to_string(ranks[0]) +
                            " could not create it: " + (name.empty() ? "" : name.substr(1)));
  }
  ASSIGN_OR_RETURN(void* base, AttachSegment(name, bytes));
  if (static_cast<ShmHeader*>(base)->magic != kShmMagic) {
    ::munmap(base, bytes);
    return UnavailableError(name + " is not a trainyard segment");
  }
  return base;
}

// Every member says whether it mapped the segment; all get the same verdict.
Status AgreeOnSegment(Store& store, const std::vector<int>& ranks, int me, const Status& mine,
                      std::chrono::milliseconds timeout) {
  const std::string prefix = "shm/mapped/";
  RETURN_IF_ERROR(
      store.Set(prefix + std::to_string(ranks[me]), mine.ok() ? "" : "!" + mine.message()));
  for (size_t i = 0; i < ranks.size(); ++i) {
    ASSIGN_OR_RETURN(std::string said, store.Get(prefix + std::to_string(ranks[i]), timeout));
    if (!said.empty()) {
      return UnavailableError("rank " + std::to_string(ranks[i]) +
                              " could not map the shared-memory segment: " + said.substr(1));
    }
  }
  return OkStatus();
}

}  // namespace

std::string HostKey() {
  std::ostringstream key;
  key << ReadFirstLine("/proc/sys/kernel/random/boot_id") << "/";
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  key << host << "/" << NamespaceOf("ipc") << "/" << NamespaceOf("pid") << "/"
      << NamespaceOf("net");
  return key.str();
}

size_t ShmSegmentBytes(int size) {
  return kShmDataOffset + static_cast<size_t>(size) * 2 * kShmBufferBytes;
}

StatusOr<std::unique_ptr<ShmComm>> ShmComm::Create(Store& store, const std::vector<int>& ranks,
                                                   int local_rank, const std::string& tag,
                                                   std::chrono::milliseconds timeout) {
  if (ranks.size() < 2 || ranks.size() > static_cast<size_t>(kShmMaxRanks)) {
    return InvalidArgumentError("shared memory: a local group of " + std::to_string(ranks.size()) +
                                " ranks; it must have 2 to " + std::to_string(kShmMaxRanks));
  }
  const size_t bytes = ShmSegmentBytes(static_cast<int>(ranks.size()));
  StatusOr<void*> base = MapSegment(store, ranks, local_rank, tag, bytes, timeout);
  Status agreed = AgreeOnSegment(store, ranks, local_rank, base.status(), timeout);
  // Every member has mapped it or given up: nobody opens it by name again.
  auto name = store.Get("shm/name/" + std::to_string(ranks[0]), std::chrono::milliseconds(0));
  if (name.ok() && !name->empty() && (*name)[0] == '/') ::shm_unlink(name->c_str());
  if (!base.ok()) return base.status();
  if (!agreed.ok()) {
    ::munmap(*base, bytes);
    return agreed;
  }
  auto* header = static_cast<ShmHeader*>(*base);
  header->slots[local_rank].pid = static_cast<int32_t>(::getpid());
  std::unique_ptr<ShmComm> comm(new ShmComm(ranks, local_rank, timeout, *base, bytes));
  // Every pid is in place before the first wait looks at one.
  RETURN_IF_ERROR(comm->Barrier());
  return comm;
}

ShmComm::ShmComm(std::vector<int> ranks, int me, std::chrono::milliseconds timeout, void* base,
                 size_t bytes)
    : ranks_(std::move(ranks)),
      me_(me),
      timeout_(timeout),
      base_(base),
      bytes_(bytes),
      header_(static_cast<ShmHeader*>(base)) {}

ShmComm::~ShmComm() { ::munmap(base_, bytes_); }

}  // namespace trainyard::dist::internal
