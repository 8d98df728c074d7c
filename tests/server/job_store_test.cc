#include "server/job_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

v1::Job MakeJob(const std::string& id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_name("t");
  job.set_state(state);
  return job;
}

v1::JobEvent StateEvent(int64_t seq, v1::JobState from, v1::JobState to) {
  v1::JobEvent e;
  e.set_seq(seq);
  e.mutable_state()->set_from(from);
  e.mutable_state()->set_to(to);
  return e;
}

std::unique_ptr<JobStore> OpenOrDie(const std::string& path) {
  StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::vector<v1::JobState> Tos(const std::vector<v1::JobEvent>& events) {
  std::vector<v1::JobState> out;
  for (const v1::JobEvent& e : events) out.push_back(e.state().to());
  return out;
}

// A file's bytes, and writing them back.
std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void SetBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// `n` jobs from t-<first>, each with a 3000-byte name, so that each commit writes a few pages.
void CommitJobs(JobStore& store, int first, int n) {
  for (int i = first; i < first + n; ++i) {
    v1::Job job = MakeJob("t-" + std::to_string(i), v1::PENDING);
    job.set_name(std::string(3000, 'a' + static_cast<char>(i % 26)));
    v1::JobEvent e = StateEvent(1, v1::JOB_STATE_UNSPECIFIED, v1::PENDING);
    ASSERT_TRUE(store.Commit(job, &e).ok());
  }
}

size_t JobCount(JobStore& store) {
  StatusOr<std::vector<v1::Job>> jobs = store.LoadJobs();
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  return jobs.ok() ? jobs->size() : 0;
}

// The jobs SQLite itself reads from a store, read-only (it changes no file), without our checks.
int RawJobCount(const std::string& path) {
  sqlite3* db = nullptr;
  sqlite3_stmt* st = nullptr;
  int n = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "SELECT count(*) FROM jobs", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

void RawExec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << sql << ": " << err;
  sqlite3_free(err);
}

// jobs.db and jobs.db-wal (where there is one) of `from` into `to`: while the store that writes
// them is open, what its process leaves when it dies.
void CopyStore(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  for (const char* name : {"jobs.db", "jobs.db-wal"}) {
    if (!fs::exists(from + "/" + name)) continue;
    fs::copy_file(from + "/" + name, to + "/" + name, fs::copy_options::overwrite_existing);
  }
}

// A store at `dir`/jobs.db whose `n` jobs were committed only to its WAL (the writer died).
void MakeStoreInWal(const std::string& dir, int n) {
  testing::TempDir scratch;
  std::unique_ptr<JobStore> store = OpenOrDie(scratch.File("jobs.db"));
  ASSERT_NE(store, nullptr);
  CommitJobs(*store, 0, n);
  CopyStore(scratch.path(), dir);
}

// The frames of a WAL file, as https://www.sqlite.org/fileformat2.html#walformat lays them out.
struct Wal {
  explicit Wal(std::string b) : bytes(std::move(b)) {}
  uint32_t U32(size_t at) const {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + at;
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
  }
  size_t PageSize() const { return U32(8); }
  size_t Frame(size_t i) const { return 32 + i * (24 + PageSize()); }  // its offset
  size_t Frames() const { return (bytes.size() - 32) / (24 + PageSize()); }
  bool Commits(size_t i) const { return U32(Frame(i) + 4) != 0; }
  std::string Salts(size_t i) const { return bytes.substr(Frame(i) + 8, 8); }
  std::string HeaderSalts() const { return bytes.substr(16, 8); }
  std::string bytes;
};

// A refusal: DataLoss naming `file` and what is wrong (`what`), with the ways to recover.
void ExpectDamaged(const StatusOr<std::unique_ptr<JobStore>>& store, const std::string& file,
                   const std::string& what) {
  ASSERT_FALSE(store.ok()) << "opened a damaged " << file;
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status();
  const std::string& message = store.status().message();
  EXPECT_THAT(message, HasSubstr("job store " + file + " is damaged: "));
  EXPECT_THAT(message, HasSubstr(what));
  EXPECT_THAT(message, HasSubstr("restore --state-dir from a backup"));
  EXPECT_THAT(message, HasSubstr("\"Backup and restore\""));
  EXPECT_THAT(message, HasSubstr("sqlite3 -readonly"));
  EXPECT_THAT(message, HasSubstr("PRAGMA integrity_check"));
  EXPECT_THAT(message, HasSubstr("to start with an empty store"));
}

TEST(SqliteJobStoreTest, JobsAndEventsSurviveReopeningInOrder) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  {
    std::unique_ptr<JobStore> store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    v1::JobEvent e = StateEvent(1, v1::JOB_STATE_UNSPECIFIED, v1::PENDING);
    ASSERT_TRUE(store->Commit(MakeJob("t-1", v1::PENDING), &e).ok());
    ASSERT_TRUE(store->Commit(MakeJob("t-2", v1::PENDING), &e).ok());
    e = StateEvent(2, v1::PENDING, v1::SCHEDULED);
    ASSERT_TRUE(store->Commit(MakeJob("t-1", v1::SCHEDULED), &e).ok());
    e = StateEvent(3, v1::SCHEDULED, v1::RUNNING);
    ASSERT_TRUE(store->Commit(MakeJob("t-1", v1::RUNNING), &e).ok());
    v1::Job with_step = MakeJob("t-2", v1::PENDING);
    with_step.mutable_last_step()->set_step(7);
    ASSERT_TRUE(store->Commit(with_step, nullptr).ok());  // a job without an event
  }
  std::unique_ptr<JobStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);

  StatusOr<std::vector<v1::Job>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  // In the order of their first commit, each as last committed.
  EXPECT_EQ((*jobs)[0].id(), "t-1");
  EXPECT_EQ((*jobs)[0].state(), v1::RUNNING);
  EXPECT_EQ((*jobs)[1].id(), "t-2");
  EXPECT_EQ((*jobs)[1].last_step().step(), 7);

  StatusOr<std::vector<v1::JobEvent>> events = store->LoadEvents("t-1");
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].seq(), 1);
  EXPECT_EQ((*events)[2].seq(), 3);
  EXPECT_EQ(Tos(*events), (std::vector<v1::JobState>{v1::PENDING, v1::SCHEDULED, v1::RUNNING}));
  EXPECT_EQ(store->LoadEvents("t-2")->size(), 1u);
  EXPECT_TRUE(store->LoadEvents("t-9")->empty());

  // The reopened store takes new commits after the old ones.
  v1::JobEvent e = StateEvent(1, v1::JOB_STATE_UNSPECIFIED, v1::PENDING);
  ASSERT_TRUE(store->Commit(MakeJob("t-3", v1::PENDING), &e).ok());
  EXPECT_EQ(store->LoadJobs()->back().id(), "t-3");
}

TEST(SqliteJobStoreTest, RefusesASchemaFromANewerCoordinator) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  ASSERT_NE(OpenOrDie(path), nullptr);  // creates version 1
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 99"));
}

TEST(SqliteJobStoreTest, UnopenableFileIsUnavailableNamingIt) {
  testing::TempDir dir;
  const std::string path = dir.File("missing/dir/jobs.db");
  StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
}

TEST(SqliteJobStoreTest, ANewStoreIsCreatedWholeReplacingATemporaryLeftByACrash) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  SetBytes(path + ".init", "half a store");  // a crash while creating one
  SetBytes(path + ".init-journal", "its journal");
  std::unique_ptr<JobStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(JobCount(*store), 0u);
  EXPECT_FALSE(std::filesystem::exists(path + ".init"));
  EXPECT_FALSE(std::filesystem::exists(path + ".init-journal"));
  store.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 1);
  sqlite3_finalize(st);
  sqlite3_close(db);
  EXPECT_EQ(RawJobCount(path), 0);  // the tables are there
}

TEST(SqliteJobStoreTest, RefusesAnEmptyFileAsATruncatedStore) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  SetBytes(path, "");
  ExpectDamaged(OpenSqliteJobStore(path), path, "it is empty (0 bytes)");
  EXPECT_EQ(std::filesystem::file_size(path), 0u);  // left for the operator, not re-created
}

TEST(SqliteJobStoreTest, RefusesAFileCutShortMidPageOrAtAPageBoundary) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  {
    std::unique_ptr<JobStore> store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    CommitJobs(*store, 0, 40);
  }
  const std::string whole = Bytes(path);
  ASSERT_EQ(whole.size() % 4096, 0u);
  ASSERT_GE(whole.size(), 20u * 4096) << "too small a store to cut";
  SetBytes(path, whole.substr(0, whole.size() / 2 + 100));
  ExpectDamaged(OpenSqliteJobStore(path), path, "the file was cut short");
  SetBytes(path, whole.substr(0, (whole.size() / 4096 / 2) * 4096));
  ExpectDamaged(OpenSqliteJobStore(path), path, "database disk image is malformed");
}

TEST(SqliteJobStoreTest, RefusesGarbageAndAPageOfGarbageInsideTheFile) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  std::string garbage(8192, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 131 + 7);
  SetBytes(path, garbage);
  ExpectDamaged(OpenSqliteJobStore(path), path, "it is not a SQLite database");

  std::filesystem::remove(path);
  {
    std::unique_ptr<JobStore> store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    CommitJobs(*store, 0, 40);
  }
  std::string bytes = Bytes(path);
  bytes.replace(bytes.size() - 2 * 4096, 4096, garbage.substr(0, 4096));  // a leaf of jobs
  SetBytes(path, bytes);
  ExpectDamaged(OpenSqliteJobStore(path), path, "database disk image is malformed");
}

// Reads that scan the table succeed on it; what goes through the primary key's index (every
// upsert, every event lookup) does not. PRAGMA quick_check would not see it.
TEST(SqliteJobStoreTest, RefusesAStoreWhoseIndexDisagreesWithItsTable) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  {
    std::unique_ptr<JobStore> store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    CommitJobs(*store, 0, 40);
  }
  std::string bytes = Bytes(path);
  size_t at = std::string::npos;  // t-17 in a table leaf page (type 13), not in an index
  for (size_t page = 4096; page < bytes.size() && at == std::string::npos; page += 4096) {
    const size_t found = bytes[page] == 13 ? bytes.find("t-17", page) : std::string::npos;
    if (found < page + 4096) at = found;
  }
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] = '9';  // t-19 in the table, t-17 in the index
  SetBytes(path, bytes);
  EXPECT_EQ(RawJobCount(path), 40);  // SQLite alone reads it
  ExpectDamaged(OpenSqliteJobStore(path), path, "PRAGMA integrity_check finds: ");
}

TEST(SqliteJobStoreTest, RefusesAStoreWhoseSchemaWasNeverInitialised) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  ASSERT_NE(OpenOrDie(path), nullptr);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  RawExec(db, "PRAGMA user_version=0");
  sqlite3_close(db);
  ExpectDamaged(OpenSqliteJobStore(path), path, "its schema version (user_version) is 0");
}

TEST(SqliteJobStoreTest, RefusesAMissingTableOrColumnAndLeavesTheFilesAsTheyWere) {
  testing::TempDir dir, copy;
  const std::string path = dir.File("jobs.db");
  ASSERT_NE(OpenOrDie(path), nullptr);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  RawExec(db, "PRAGMA wal_autocheckpoint=0; DROP TABLE events");
  CopyStore(dir.path(), copy.path());  // with the drop only in the WAL
  const std::string wal = Bytes(copy.File("jobs.db-wal"));
  ASSERT_GT(wal.size(), 32u);
  ExpectDamaged(OpenSqliteJobStore(copy.File("jobs.db")), copy.File("jobs.db"),
                "it has schema version 1 but no table events");
  EXPECT_EQ(Bytes(copy.File("jobs.db-wal")), wal);  // refused without a checkpoint

  RawExec(db,
          "CREATE TABLE events (job_id TEXT, seq INTEGER, body BLOB, PRIMARY KEY (job_id));"
          "ALTER TABLE jobs RENAME COLUMN state TO status");
  sqlite3_close(db);
  ExpectDamaged(OpenSqliteJobStore(path), path,
                "its table jobs has the columns (id:1 seq:0 status:0");
}

TEST(SqliteJobStoreTest, OrphanedWalWithoutItsDatabaseIsRefusedNotReplayedIntoANewStore) {
  testing::TempDir dir;
  MakeStoreInWal(dir.path(), 3);
  std::filesystem::remove(dir.File("jobs.db"));
  ExpectDamaged(OpenSqliteJobStore(dir.File("jobs.db")), dir.File("jobs.db-wal"),
                "is missing, so the store was partly removed");
}

// Waits for a child process to exit (up to 20 s, then kills it): its exit code, -1 if killed.
int WaitForExit(pid_t child) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // waitpid has no timeout
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SqliteJobStoreTest, AWriterThatDiedWithCommitsOnlyInItsWalLosesNothing) {
  testing::TempDir dir;
  const std::string path = dir.File("jobs.db");
  ASSERT_NE(OpenOrDie(path), nullptr);  // created and closed: no WAL
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // commits, then dies without closing the store (no checkpoint)
    StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(path);
    bool ok = store.ok();
    for (int i = 0; ok && i < 5; ++i)
      ok = (*store)->Commit(MakeJob("t-" + std::to_string(i), v1::PENDING), nullptr).ok();
    ::_exit(ok ? 0 : 1);
  }
  ASSERT_EQ(WaitForExit(child), 0);
  ASSERT_GT(std::filesystem::file_size(path + "-wal"), 32u);
  std::unique_ptr<JobStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(JobCount(*store), 5u);
}

TEST(SqliteJobStoreTest, AWalEndingInACutUncommittedTransactionReopensWithTheCommittedJobs) {
  testing::TempDir dir;
  MakeStoreInWal(dir.path(), 4);
  Wal wal(Bytes(dir.File("jobs.db-wal")));
  const size_t commit = wal.Frames() - 1;
  ASSERT_TRUE(wal.Commits(commit));
  ASSERT_FALSE(wal.Commits(commit - 1)) << "the last commit is a single frame";
  // The fourth job's frames stay, its commit frame is cut in the middle: a crash while writing.
  SetBytes(dir.File("jobs.db-wal"), wal.bytes.substr(0, wal.Frame(commit) + 100));
  std::unique_ptr<JobStore> store = OpenOrDie(dir.File("jobs.db"));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(JobCount(*store), 3u);
}

TEST(SqliteJobStoreTest, RefusesAWalWhoseHeaderDoesNotVerify) {
  testing::TempDir dir;
  MakeStoreInWal(dir.path(), 3);
  std::string wal = Bytes(dir.File("jobs.db-wal"));
  wal[13] ^= 0x01;  // the checkpoint sequence number, under the header's checksum
  SetBytes(dir.File("jobs.db-wal"), wal);
  EXPECT_EQ(RawJobCount(dir.File("jobs.db")), 0);  // what SQLite alone would serve
  ExpectDamaged(OpenSqliteJobStore(dir.File("jobs.db")), dir.File("jobs.db-wal"),
                "its header's checksum does not verify");
  SetBytes(dir.File("jobs.db-wal"), wal.substr(0, 20));
  ExpectDamaged(OpenSqliteJobStore(dir.File("jobs.db")), dir.File("jobs.db-wal"),
                "it is 20 bytes, shorter than a WAL's header");
}

TEST(SqliteJobStoreTest, RefusesAWalWithADamagedFrameInTheMiddle) {
  testing::TempDir dir;
  MakeStoreInWal(dir.path(), 6);
  Wal wal(Bytes(dir.File("jobs.db-wal")));
  const size_t middle = wal.Frames() / 2;
  wal.bytes[wal.Frame(middle) + 24 + 2000] ^= 0x10;  // one bit of its page
  SetBytes(dir.File("jobs.db-wal"), wal.bytes);
  EXPECT_LT(RawJobCount(dir.File("jobs.db")), 6);  // SQLite alone drops the later commits
  ExpectDamaged(OpenSqliteJobStore(dir.File("jobs.db")), dir.File("jobs.db-wal"),
                "frame " + std::to_string(middle) + " (at byte " +
                    std::to_string(wal.Frame(middle)) +
                    ") carries this WAL's salts but its "
                    "checksum does not verify");
}

TEST(SqliteJobStoreTest, RefusesJunkWithTheCurrentSaltsAfterTheValidFrames) {
  testing::TempDir dir;
  MakeStoreInWal(dir.path(), 3);
  Wal wal(Bytes(dir.File("jobs.db-wal")));
  const size_t n = wal.Frames();
  // A frame whose header is the last one's (its salts, a commit) over a page of junk.
  wal.bytes += wal.bytes.substr(wal.Frame(n - 1), 24) + std::string(wal.PageSize(), 'j');
  SetBytes(dir.File("jobs.db-wal"), wal.bytes);
  ExpectDamaged(OpenSqliteJobStore(dir.File("jobs.db")), dir.File("jobs.db-wal"),
                "frame " + std::to_string(n) + " (at byte");
}

// A WAL rewritten from its start after a checkpoint: a few frames of the current generation,
// then frames of the one before (other salts), as SQLite leaves it.
void MakeStoreWithStaleFrames(const std::string& to) {
  testing::TempDir dir;
  std::unique_ptr<JobStore> store = OpenOrDie(dir.File("jobs.db"));
  ASSERT_NE(store, nullptr);
  CommitJobs(*store, 0, 10);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.File("jobs.db").c_str(), &db), SQLITE_OK);
  RawExec(db, "PRAGMA wal_checkpoint(RESTART)");  // the next commit rewrites the WAL
  sqlite3_close(db);
  CommitJobs(*store, 10, 1);
  CopyStore(dir.path(), to);
}

TEST(SqliteJobStoreTest, AWalWithStaleFramesOfAnOlderGenerationReopensWithEveryJob) {
  testing::TempDir dir;
  MakeStoreWithStaleFrames(dir.path());
  Wal wal(Bytes(dir.File("jobs.db-wal")));
  ASSERT_EQ(wal.Salts(0), wal.HeaderSalts());
  ASSERT_NE(wal.Salts(wal.Frames() - 1), wal.HeaderSalts()) << "no stale frames to test with";
  std::unique_ptr<JobStore> store = OpenOrDie(dir.File("jobs.db"));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(JobCount(*store), 11u);
}

TEST(SqliteJobStoreTest, RefusesFramesWithTheCurrentSaltsAfterAStaleOne) {
  testing::TempDir dir;
  MakeStoreWithStaleFrames(dir.path());
  Wal wal(Bytes(dir.File("jobs.db-wal")));
  size_t stale = 0;
  while (wal.Salts(stale) == wal.HeaderSalts()) ++stale;
  const size_t last = wal.Frames() - 1;
  ASSERT_GT(last, stale);
  wal.bytes.replace(wal.Frame(last) + 8, 8, wal.HeaderSalts());
  SetBytes(dir.File("jobs.db-wal"), wal.bytes);
  ExpectDamaged(OpenSqliteJobStore(dir.File("jobs.db")), dir.File("jobs.db-wal"),
                "frame " + std::to_string(last) + " (at byte " + std::to_string(wal.Frame(last)) +
                    ") carries this WAL's salts after frame " + std::to_string(stale) +
                    " of an older generation");
}

TEST(MemoryJobStoreTest, KeepsJobsInFirstCommitOrderAndEventsOldestFirst) {
  std::unique_ptr<JobStore> store = NewMemoryJobStore();
  v1::JobEvent e = StateEvent(1, v1::JOB_STATE_UNSPECIFIED, v1::PENDING);
  ASSERT_TRUE(store->Commit(MakeJob("t-1", v1::PENDING), &e).ok());
  ASSERT_TRUE(store->Commit(MakeJob("t-2", v1::PENDING), &e).ok());
  e = StateEvent(2, v1::PENDING, v1::CANCELLED);
  ASSERT_TRUE(store->Commit(MakeJob("t-1", v1::CANCELLED), &e).ok());

  std::vector<v1::Job> jobs = *store->LoadJobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id(), "t-1");
  EXPECT_EQ(jobs[0].state(), v1::CANCELLED);
  EXPECT_EQ(Tos(*store->LoadEvents("t-1")),
            (std::vector<v1::JobState>{v1::PENDING, v1::CANCELLED}));
}

}  // namespace
}  // namespace trainyard::server
