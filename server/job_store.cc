#include "server/job_store.h"

#include <sqlite3.h>

#include <map>
#include <mutex>

namespace trainyard::server {
namespace {

// Version 1: jobs(id, seq, state, body) and events(job_id, seq, body); bodies are the
// serialized v1::Job / v1::JobEvent. Bump on any change and migrate in Open.
constexpr int kSchemaVersion = 1;

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteJobStore() override { sqlite3_close(db_); }

  Status Init() {
    RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
    // FULL: every commit is fsynced, so an acknowledged state change survives power loss too
    // (commits are state changes and a few metrics snapshots a minute, not per-step writes).
    RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL"));
    RETURN_IF_ERROR(Exec("PRAGMA busy_timeout=5000"));
    int version = 0;
    RETURN_IF_ERROR(QueryInt("PRAGMA user_version", &version));
    if (version > kSchemaVersion) {
      return FailedPreconditionError("job store " + path_ + " has schema version " +
                                     std::to_string(version) + "; this coordinator reads up to " +
                                     std::to_string(kSchemaVersion) + " (use a newer coordinator)");
    }
    if (version == 0) {
      RETURN_IF_ERROR(Exec(
          "BEGIN;"
          "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
          "  state INTEGER NOT NULL, body BLOB NOT NULL);"
          "CREATE TABLE IF NOT EXISTS events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, "
          "  body BLOB NOT NULL, PRIMARY KEY (job_id, seq));"
          "PRAGMA user_version=1;"
          "COMMIT;"));
    }
    return OkStatus();
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
    RETURN_IF_ERROR(Query("SELECT body FROM events WHERE job_id = ?1 ORDER BY seq", {job_id},
                          [&](sqlite3_stmt* st) {
                            v1::JobEvent e;
                            if (!e.ParseFromArray(sqlite3_column_blob(st, 0),
                                                  sqlite3_column_bytes(st, 0))) {
                              return DataLossError("job store " + path_ + ": an event of " +
                                                   job_id + " does not parse");
                            }
                            events.push_back(std::move(e));
                            return OkStatus();
                          }));
    return events;
  }

 private:
  Status Error(const std::string& what) const {
    return UnavailableError("job store " + path_ + ": " + what + ": " + sqlite3_errmsg(db_));
  }

  Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string message = err ? err : "error";
      sqlite3_free(err);
      return UnavailableError("job store " + path_ + ": " + message);
    }
    return OkStatus();
  }

  Status QueryInt(const char* sql, int* out) {
    return Query(sql, {}, [&](sqlite3_stmt* st) {
      *out = sqlite3_column_int(st, 0);
      return OkStatus();
    });
  }

  // Runs `sql` with text parameters, calling `row` for each result row.
  template <typename F>
  Status Query(const char* sql, const std::vector<std::string>& params, F row) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &st, nullptr) != SQLITE_OK) return Error("prepare");
    for (size_t i = 0; i < params.size(); ++i) {
      sqlite3_bind_text(st, static_cast<int>(i + 1), params[i].c_str(), -1, SQLITE_TRANSIENT);
    }
    Status status;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && status.ok()) status = row(st);
    if (status.ok() && rc != SQLITE_DONE && rc != SQLITE_ROW) status = Error("query");
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
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? OkStatus() : Error("write");
  }

  Status Upsert(const v1::Job& job) {
    // seq keeps the first commit's order: the created time, then the id's number.
    return Write(
        "INSERT INTO jobs (id, seq, state, body) VALUES (?1, ?2, ?3, ?4) "
        "ON CONFLICT(id) DO UPDATE SET state = excluded.state, body = excluded.body",
        job.id(), NextSeq(), job.state(), job.SerializeAsString());
  }

  Status Append(const std::string& job_id, const v1::JobEvent& event) {
    return Write("INSERT OR REPLACE INTO events (job_id, seq, body) VALUES (?1, ?2, ?4)",
                 job_id, event.seq(), 0, event.SerializeAsString());
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

}  // namespace

StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return UnavailableError("cannot open the job store " + path + ": " + message);
  }
  auto store = std::make_unique<SqliteJobStore>(db, path);
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<JobStore>(std::move(store));
}

std::unique_ptr<JobStore> NewMemoryJobStore() { return std::make_unique<MemoryJobStore>(); }

}  // namespace trainyard::server
