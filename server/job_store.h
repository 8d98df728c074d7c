// JobStore: where the coordinator keeps every job and its stored events, so that a restarted
// coordinator loses nothing. A state change is committed (job and event in one transaction)
// before the coordinator acknowledges it.
//
//   OpenSqliteJobStore   a SQLite file in WAL mode with a schema version (what runs)
//   NewMemoryJobStore    a map, for unit tests of the coordinator's logic
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

namespace v1 = ::trainyard::v1;

class JobStore {
 public:
  virtual ~JobStore() = default;
  // Writes `job` (replacing the row of its id) and, when non-null, appends `event`; both or
  // neither, durable when this returns. Unavailable naming the file on an I/O failure.
  virtual Status Commit(const v1::Job& job, const v1::JobEvent* event) = 0;
  // Every job, in the order they were first committed.
  virtual StatusOr<std::vector<v1::Job>> LoadJobs() = 0;
  // The stored events of one job, oldest first.
  virtual StatusOr<std::vector<v1::JobEvent>> LoadEvents(const std::string& job_id) = 0;
};

// Opens the store at `path`, creating it whole when missing. An existing store is checked before
// anything is read from it, and refused with DataLoss, naming the file (`path` or `path`-wal),
// what is wrong and how to recover, when it is empty or cut short, not SQLite's, fails PRAGMA
// integrity_check, has schema version 0 or other tables than its version's, or has a WAL that
// SQLite would silently cut short (job_store.cc, Note [Refusing a damaged store]); a refusal
// leaves the file and its WAL as they were. FailedPrecondition when the file holds a schema this
// build does not know (a newer coordinator wrote it); Unavailable naming the file on an I/O
// failure. One caller opens a given path at a time (the coordinator holds its directory's lock).
StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path);

std::unique_ptr<JobStore> NewMemoryJobStore();

}  // namespace trainyard::server
