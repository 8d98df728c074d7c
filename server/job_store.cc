#include "server/job_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/durable_file.h"

namespace trainyard::server {
namespace {

// Version 1: jobs(id, seq, state, body) and events(job_id, seq, body); bodies are the
// serialized v1::Job / v1::JobEvent. Bump on any change and migrate in Open.
constexpr int kSchemaVersion = 1;
constexpr char kCreateSchema[] =
    "CREATE TABLE jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
    "  state INTEGER NOT NULL, body BLOB NOT NULL);"
    "CREATE TABLE events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "  body BLOB NOT NULL, PRIMARY KEY (job_id, seq));";
// Version 1's tables as PRAGMA table_info lists them, each column as name:place in the primary
// key (0: not in it). The statements below use exactly these.
constexpr std::pair<const char*, const char*> kTables[] = {{"jobs", "id:1 seq:0 state:0 body:0"},
                                                           {"events", "job_id:1 seq:2 body:0"}};

// Note [Refusing a damaged store]
// A store that exists is opened only when it is whole: a coordinator that started on a truncated
// file or a WAL SQLite cannot read would serve an empty or partial job list and forget the rest
// for good. So an existing file must be non-empty, SQLite's, a whole number of pages, pass
// PRAGMA integrity_check (not quick_check: it also checks that the primary-key indexes, which
// every upsert and event lookup goes through, match their tables), carry schema version 1 and
// version 1's tables; and its WAL must pass CheckWal (Note [Checking the WAL ourselves]). A store
// that does not is refused with DataLoss, naming the file, what is wrong and what to do; the
// refusal leaves the file and its WAL as they were (no checkpoint when the connection closes).
std::string RecoveryHint(const std::string& db) {
  return "; the coordinator does not start on it rather than serve an empty or partial job list. "
         "To recover: restore --state-dir from a backup (docs/operations.md, \"Backup and "
         "restore\"); or inspect it with sqlite3 -readonly " +
         db +
         " 'PRAGMA integrity_check' (without -readonly, sqlite3 checkpoints the WAL and keeps "
         "only what it can read of it); or move " +
         db + ", " + db + "-wal and " + db +
         "-shm away to start with an empty store, which forgets every job it held";
}

Status Damaged(const std::string& db, const std::string& file, const std::string& what) {
  return DataLossError("job store " + file + " is damaged: " + what + RecoveryHint(db));
}

std::string Errno() { return std::strerror(errno); }

// An open file descriptor, closed on destruction; fd < 0 when the open failed.
struct Fd {
  explicit Fd(int fd) : fd(fd) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int fd;
};

// Reads up to `n` bytes at `offset`; the count read is short only at the end of the file.
StatusOr<size_t> ReadAt(int fd, const std::string& file, uint8_t* buf, size_t n, off_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, buf + done, n - done, offset + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return UnavailableError("cannot read " + file + ": " + Errno());
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

uint32_t Get32(const uint8_t* p) {  // big-endian, as every integer in SQLite's files
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// What SQLite says only later and vaguely, or not at all: an empty file, a file that is not
// SQLite's, one cut short in the middle of a page. Returns the page size.
StatusOr<uint32_t> CheckDatabaseFile(const std::string& path, off_t size) {
  if (size == 0) return Damaged(path, path, "it is empty (0 bytes), as a truncated store is");
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.fd < 0) return UnavailableError("cannot read the job store " + path + ": " + Errno());
  uint8_t h[100];
  ASSIGN_OR_RETURN(const size_t n, ReadAt(file.fd, path, h, sizeof(h), 0));
  if (n < sizeof(h) || std::memcmp(h, "SQLite format 3", 16) != 0) {
    return Damaged(path, path,
                   "it is not a SQLite database (it does not start with SQLite's header)");
  }
  const uint32_t field = uint32_t{h[16]} << 8 | h[17];  // 1 stands for 65536
  const uint32_t page_size = field == 1 ? 65536 : field;
  if (page_size < 512 || (page_size & (page_size - 1)) != 0) {
    return Damaged(path, path, "its header names page size " + std::to_string(field));
  }
  if (size % page_size != 0) {
    return Damaged(path, path,
                   std::to_string(size) + " bytes is not a whole number of its " +
                       std::to_string(page_size) + "-byte pages: the file was cut short");
  }
  return page_size;
}

// Note [Checking the WAL ourselves]
// SQLite replays <db>-wal up to the first frame that does not verify and drops the rest without
// an error (https://www.sqlite.org/fileformat2.html#walformat): one flipped bit in an early frame
// silently loses every transaction committed after it, and a WAL whose header does not verify is
// ignored whole. So before SQLite opens the store, CheckWal walks the WAL as SQLite's recovery
// does and calls it damaged where recovery would drop frames of the current generation:
//   - a non-empty WAL shorter than its header, or whose header does not verify;
//   - a complete frame with the header's salts whose cumulative checksum fails (or page 0);
//   - a frame with the header's salts after the first frame of an older generation.
// Normal: frames of an older generation after the current ones (after a checkpoint the WAL is
// rewritten from its start, not truncated), a trailing partial frame, and current frames that
// end without a commit frame (a transaction cut by a crash, never acknowledged). The rule cannot
// tell damage from a SIGKILL that falls between the two writes of one frame (header, then page)
// over an older generation; that is a window of microseconds per commit, and refusing is the
// side that loses nothing.
constexpr size_t kWalHeader = 32, kFrameHeader = 24;

struct WalHeader {
  bool big_endian = false;  // the checksum words' byte order: the magic number's low bit
  uint32_t page_size = 0;
  uint8_t salts[8] = {};
  uint32_t sum[2] = {0, 0};  // the header's checksum, where the frames' running checksum starts
};

// SQLite's WAL checksum: two running sums over pairs of 32-bit words; n is a multiple of 8.
void WalChecksum(bool big_endian, const uint8_t* p, size_t n, uint32_t sum[2]) {
  auto word = [&](const uint8_t* q) {
    return big_endian ? Get32(q)
                      : uint32_t{q[3]} << 24 | uint32_t{q[2]} << 16 | uint32_t{q[1]} << 8 | q[0];
  };
  for (size_t i = 0; i < n; i += 8) {
    sum[0] += word(p + i) + sum[1];
    sum[1] += word(p + i + 4) + sum[0];
  }
}

StatusOr<WalHeader> ParseWalHeader(const std::string& db, const std::string& wal, const uint8_t* h,
                                   uint32_t db_page_size) {
  const uint32_t magic = Get32(h);
  if (magic != 0x377f0682 && magic != 0x377f0683) {
    return Damaged(db, wal, "its header does not start with a WAL's magic number");
  }
  WalHeader w;
  w.big_endian = (magic & 1) != 0;
  WalChecksum(w.big_endian, h, 24, w.sum);
  if (w.sum[0] != Get32(h + 24) || w.sum[1] != Get32(h + 28)) {
    return Damaged(db, wal,
                   "its header's checksum does not verify, so SQLite would ignore every "
                   "transaction in it");
  }
  if (Get32(h + 4) != 3007000) {
    return Damaged(db, wal, "its header names format " + std::to_string(Get32(h + 4)));
  }
  w.page_size = Get32(h + 8);
  if (w.page_size != db_page_size) {
    return Damaged(db, wal,
                   "its header names " + std::to_string(w.page_size) + "-byte pages, the " +
                       "database " + std::to_string(db_page_size) + "-byte pages");
  }
  std::memcpy(w.salts, h + 16, 8);
  return w;
}

Status CheckWalFrames(const std::string& db, const std::string& wal, int fd, off_t size,
                      WalHeader w) {
  const size_t frame = kFrameHeader + w.page_size;
  // A trailing partial frame is a write cut by a crash: not counted.
  const int64_t frames = (size - static_cast<off_t>(kWalHeader)) / static_cast<off_t>(frame);
  std::vector<uint8_t> buf(frame);
  int64_t older = -1;  // the first frame of an older generation, once seen
  for (int64_t i = 0; i < frames; ++i) {
    const off_t at = static_cast<off_t>(kWalHeader + static_cast<size_t>(i) * frame);
    const size_t want = older < 0 ? frame : kFrameHeader;  // past the current ones: salts only
    ASSIGN_OR_RETURN(const size_t n, ReadAt(fd, wal, buf.data(), want, at));
    if (n < want) return UnavailableError("cannot read " + wal + ": it shrank while read");
    const bool current = std::memcmp(buf.data() + 8, w.salts, 8) == 0;
    const std::string where =
        "frame " + std::to_string(i) + " (at byte " + std::to_string(at) + ")";
    if (older >= 0 && current) {
      return Damaged(db, wal,
                     where + " carries this WAL's salts after frame " + std::to_string(older) +
                         " of an older generation, so SQLite would drop every transaction from "
                         "frame " +
                         std::to_string(older) + " on");
    }
    if (older >= 0) continue;
    if (!current) {
      older = i;
      continue;
    }
    WalChecksum(w.big_endian, buf.data(), 8, w.sum);
    WalChecksum(w.big_endian, buf.data() + kFrameHeader, w.page_size, w.sum);
    if (Get32(buf.data()) == 0 || w.sum[0] != Get32(buf.data() + 16) ||
        w.sum[1] != Get32(buf.data() + 20)) {
      return Damaged(db, wal,
                     where +
                         " carries this WAL's salts but its checksum does not verify, so "
                         "SQLite would drop it and every transaction after it");
    }
  }
  return OkStatus();
}

// Note [Checking the WAL ourselves]. OK when there is no WAL or it is empty.
Status CheckWal(const std::string& db, uint32_t page_size) {
  const std::string wal = db + "-wal";
  Fd file(::open(wal.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.fd < 0 && errno == ENOENT) return OkStatus();
  struct stat st;
  if (file.fd < 0 || ::fstat(file.fd, &st) != 0) {
    return UnavailableError("cannot read " + wal + ": " + Errno());
  }
  if (st.st_size == 0) return OkStatus();
  if (st.st_size < static_cast<off_t>(kWalHeader)) {
    return Damaged(db, wal,
                   "it is " + std::to_string(st.st_size) + " bytes, shorter than a WAL's header");
  }
  uint8_t h[kWalHeader];
  ASSIGN_OR_RETURN(const size_t n, ReadAt(file.fd, wal, h, sizeof(h), 0));
  if (n < sizeof(h)) return UnavailableError("cannot read " + wal + ": it shrank while read");
  ASSIGN_OR_RETURN(const WalHeader w, ParseWalHeader(db, wal, h, page_size));
  return CheckWalFrames(db, wal, file.fd, st.st_size, w);
}

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteJobStore() override { sqlite3_close(db_); }

  // The checks of an existing store, before anything is served (Note [Refusing a damaged
  // store]). Until they pass, closing the connection leaves the files as they were.
  Status Verify() {
    sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    RETURN_IF_ERROR(Exec("PRAGMA busy_timeout=5000"));
    RETURN_IF_ERROR(CheckIntegrity());
    int version = 0;
    RETURN_IF_ERROR(QueryInt("PRAGMA user_version", &version));
    if (version > kSchemaVersion) {
      return FailedPreconditionError("job store " + path_ + " has schema version " +
                                     std::to_string(version) + "; this coordinator reads up to " +
                                     std::to_string(kSchemaVersion) + " (use a newer coordinator)");
    }
    if (version == 0) {
      return Damaged(path_, path_,
                     "its schema version (user_version) is 0, so it was never initialised; "
                     "a coordinator creates its store whole, with version " +
                         std::to_string(kSchemaVersion));
    }
    RETURN_IF_ERROR(CheckTables());
    sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);
    return OkStatus();
  }

  Status Init() {
    RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
    // FULL: every commit is fsynced, so an acknowledged state change survives power loss too
    // (commits are state changes and a few metrics snapshots a minute, not per-step writes).
    return Exec("PRAGMA synchronous=FULL");
  }

  Status Commit(const v1::Job& job, const v1::JobEvent* event) override {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status s = Upsert(job);
    if (s.ok() && event != nullptr) s = Append(job.id(), *event);
    if (!s.ok()) {
      (void)Exec("ROLLBACK");
      return s;
    }
    Status committed = Exec("COMMIT");
    if (!committed.ok() && !sqlite3_get_autocommit(db_)) (void)Exec("ROLLBACK");
    return committed;
  }

  StatusOr<std::vector<v1::Job>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<v1::Job> jobs;
    RETURN_IF_ERROR(Query("SELECT body FROM jobs ORDER BY seq", {}, [&](sqlite3_stmt* st) {
      v1::Job job;
      if (!job.ParseFromArray(sqlite3_column_blob(st, 0), sqlite3_column_bytes(st, 0))) {
        return DataLossError("job store " + path_ + ": a job row does not parse");
      }
      jobs.push_back(std::move(job));
      return OkStatus();
    }));
    return jobs;
  }

  StatusOr<std::vector<v1::JobEvent>> LoadEvents(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<v1::JobEvent> events;
    RETURN_IF_ERROR(Query(
        "SELECT body FROM events WHERE job_id = ?1 ORDER BY seq", {job_id}, [&](sqlite3_stmt* st) {
          v1::JobEvent e;
          if (!e.ParseFromArray(sqlite3_column_blob(st, 0), sqlite3_column_bytes(st, 0))) {
            return DataLossError("job store " + path_ + ": an event of " + job_id +
                                 " does not parse");
          }
          events.push_back(std::move(e));
          return OkStatus();
        }));
    return events;
  }

 private:
  // DataLoss for a store SQLite finds malformed, Unavailable for the rest (I/O, locks).
  Status Error(const std::string& what) const {
    const int code = sqlite3_errcode(db_) & 0xff;  // the primary code of an extended one
    const std::string message = what + ": " + sqlite3_errmsg(db_);
    if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) return Damaged(path_, path_, message);
    return UnavailableError("job store " + path_ + ": " + message);
  }

  Status Exec(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) return Error(sql);
    return OkStatus();
  }

  Status QueryInt(const char* sql, int* out) {
    return Query(sql, {}, [&](sqlite3_stmt* st) {
      *out = sqlite3_column_int(st, 0);
      return OkStatus();
    });
  }

  static std::string Text(sqlite3_stmt* st, int column) {
    const unsigned char* text = sqlite3_column_text(st, column);
    return text ? reinterpret_cast<const char*>(text) : "";
  }

  Status CheckIntegrity() {
    std::string problems;
    RETURN_IF_ERROR(Query("PRAGMA integrity_check(5)", {}, [&](sqlite3_stmt* st) {
      problems += (problems.empty() ? "" : "; ") + Text(st, 0);
      return OkStatus();
    }));
    if (problems == "ok") return OkStatus();
    return Damaged(path_, path_, "PRAGMA integrity_check finds: " + problems);
  }

  Status CheckTables() {
    for (const auto& [table, want] : kTables) {
      std::string got;
      RETURN_IF_ERROR(Query("SELECT name, pk FROM pragma_table_info(?1) ORDER BY cid", {table},
                            [&](sqlite3_stmt* st) {
                              got += (got.empty() ? "" : " ") + Text(st, 0) + ":" + Text(st, 1);
                              return OkStatus();
                            }));
      if (got.empty()) {
        return Damaged(path_, path_, "it has schema version 1 but no table " + std::string(table));
      }
      if (got != want) {
        return Damaged(path_, path_,
                       "its table " + std::string(table) + " has the columns (" + got +
                           "), not version 1's (" + want + ")");
      }
    }
    return OkStatus();
  }

  // Runs `sql` with text parameters, calling `row` for each result row.
  template <typename F>
  Status Query(const char* sql, const std::vector<std::string>& params, F row) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &st, nullptr) != SQLITE_OK) return Error(sql);
    for (size_t i = 0; i < params.size(); ++i) {
      sqlite3_bind_text(st, static_cast<int>(i + 1), params[i].c_str(), -1, SQLITE_TRANSIENT);
    }
    Status status;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && status.ok()) status = row(st);
    if (status.ok() && rc != SQLITE_DONE && rc != SQLITE_ROW) status = Error(sql);
    sqlite3_finalize(st);
    return status;
  }

  Status Write(const char* sql, const std::string& key, int64_t n, int64_t m,
               const std::string& body) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &st, nullptr) != SQLITE_OK) return Error("prepare");
    sqlite3_bind_text(st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, n);
    sqlite3_bind_int64(st, 3, m);
    sqlite3_bind_blob(st, 4, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
    const int rc = sqlite3_step(st);
    Status status = rc == SQLITE_DONE ? OkStatus() : Error("write");
    sqlite3_finalize(st);
    return status;
  }

  Status Upsert(const v1::Job& job) {
    // seq keeps the first commit's order: the created time, then the id's number.
    return Write(
        "INSERT INTO jobs (id, seq, state, body) VALUES (?1, ?2, ?3, ?4) "
        "ON CONFLICT(id) DO UPDATE SET state = excluded.state, body = excluded.body",
        job.id(), NextSeq(), job.state(), job.SerializeAsString());
  }

  Status Append(const std::string& job_id, const v1::JobEvent& event) {
    return Write("INSERT OR REPLACE INTO events (job_id, seq, body) VALUES (?1, ?2, ?4)", job_id,
                 event.seq(), 0, event.SerializeAsString());
  }

  int64_t NextSeq() {
    int seq = 0;
    (void)QueryInt("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs", &seq);
    return seq;
  }

  std::mutex mu_;
  sqlite3* db_;
  std::string path_;
};

class MemoryJobStore final : public JobStore {
 public:
  Status Commit(const v1::Job& job, const v1::JobEvent* event) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.emplace(job.id(), job).second) order_.push_back(job.id());
    jobs_[job.id()] = job;
    if (event != nullptr) events_[job.id()].push_back(*event);
    return OkStatus();
  }
  StatusOr<std::vector<v1::Job>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<v1::Job> out;
    for (const std::string& id : order_) out.push_back(jobs_[id]);
    return out;
  }
  StatusOr<std::vector<v1::JobEvent>> LoadEvents(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return events_[job_id];
  }

 private:
  std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, v1::Job> jobs_;
  std::map<std::string, std::vector<v1::JobEvent>> events_;
};

// Note [Creating the store]
// "The file exists" must mean "the store is whole", or a crash during the first start would
// leave a file that the next start cannot tell from a truncated store. So the store is made
// under <path>.init in the same directory (schema, version, WAL mode), closed, fsynced, renamed
// to <path>, and the directory fsynced (ReplaceFile, common/durable_file.h). A <path>.init left
// by a crash is replaced. A WAL with
// content but no <path> is a store partly removed, refused: SQLite would replay it into the new
// file. Callers open a path one at a time (the coordinator holds <state-dir>/coordinator.lock).
Status CreateStore(const std::string& path) {
  const std::string wal = path + "-wal";
  struct stat st;
  if (::stat(wal.c_str(), &st) == 0 && st.st_size > 0) {
    return Damaged(path, wal,
                   "it holds " + std::to_string(st.st_size) + " bytes but " + path +
                       " is missing, so the store was partly removed");
  }
  ::unlink(wal.c_str());
  ::unlink((path + "-shm").c_str());
  const std::string init = "PRAGMA synchronous=FULL; BEGIN;" + std::string(kCreateSchema) +
                           "PRAGMA user_version=" + std::to_string(kSchemaVersion) +
                           "; COMMIT; PRAGMA journal_mode=WAL;";
  Status s = ReplaceFile(path, path + ".init", [&](const std::string& tmp) {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((tmp + suffix).c_str());
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(tmp.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, init.c_str(), nullptr, nullptr, nullptr);
    const std::string error = rc == SQLITE_OK ? "" : db ? sqlite3_errmsg(db) : "out of memory";
    if (sqlite3_close(db) != SQLITE_OK || !error.empty()) {
      return UnavailableError(error.empty() ? "close failed" : error);
    }
    return OkStatus();
  });
  if (s.ok()) return s;
  return UnavailableError("cannot create the job store " + path + ": " + std::string(s.message()));
}

}  // namespace

StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return UnavailableError("cannot open the job store " + path + ": " + Errno());
    RETURN_IF_ERROR(CreateStore(path));
    if (::stat(path.c_str(), &st) != 0) {
      return UnavailableError("cannot open the job store " + path + ": " + Errno());
    }
  }
  ASSIGN_OR_RETURN(const uint32_t page_size, CheckDatabaseFile(path, st.st_size));
  RETURN_IF_ERROR(CheckWal(path, page_size));
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return UnavailableError("cannot open the job store " + path + ": " + message);
  }
  auto store = std::make_unique<SqliteJobStore>(db, path);
  RETURN_IF_ERROR(store->Verify());
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<JobStore>(std::move(store));
}

std::unique_ptr<JobStore> NewMemoryJobStore() { return std::make_unique<MemoryJobStore>(); }

}  // namespace trainyard::server
