// The real trainyard-coordinator on a damaged job store: it exits at once, naming the file and how
// to recover, instead of starting with no jobs; on the store restored from a copy it starts and
// lists the job it held.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Cluster;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr char kSpec[] =
    R"({"name":"kept","model":{"mlp":{"sizes":[784,64,10]}},"data":{"fashion_mnist":{"limit":640}},)"
    R"("optimizer":{"sgd":{"lr":0.05}},"batch_size":32,"steps":20,"parallelism":{"world_size":1}})";

testing::ClusterOptions OneWorker() {
  testing::ClusterOptions o;
  o.workers = 1;
  return o;
}

// Starts a coordinator on `dir`/state (and a worker: a job is accepted only when it fits), submits
// kSpec, and stops the coordinator with `signal` as soon as the job is acknowledged: SIGTERM
// closes the store (everything in jobs.db), SIGKILL leaves the commits in jobs.db-wal. The job's
// id; whatever state it reached, the store holds it.
std::string StoreWithOneJob(const std::string& dir, int signal) {
  Cluster cluster(dir, OneWorker());
  std::string error;
  EXPECT_TRUE(cluster.Start(&error)) << error;
  if (!error.empty()) return "";
  StatusOr<v1::Job> job = cluster.client().Submit(kSpec);
  EXPECT_TRUE(job.ok()) << job.status() << cluster.Logs();
  cluster.coordinator().Kill(signal);  // waits for the exit (bounded)
  return job.ok() ? job->id() : "";
}

// The coordinator on `state`, to its exit (killed after 30 s: it must not start).
testing::ProcessResult RunCoordinator(const std::string& dir, const std::string& state) {
  // A flag and its value per line.
  // clang-format off
  return testing::RunProcess({std::string(TY_BIN_DIR) + "/trainyard-coordinator",
      "--listen", "127.0.0.1:0",
      "--metrics-listen", "127.0.0.1:0",
      "--state-dir", state,
      "--checkpoint-root", dir + "/checkpoints"}, 30s);
  // clang-format on
}

void CopyStore(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const char* name : {"jobs.db", "jobs.db-wal"}) {
    fs::remove(to + "/" + name);
    if (fs::exists(from + "/" + name)) fs::copy_file(from + "/" + name, to + "/" + name);
  }
  fs::remove(to + "/jobs.db-shm");
}

// What the operator does: restores the state directory from the copy, starts the coordinator.
void ExpectTheRestoredStoreListsTheJob(const std::string& dir, const std::string& id) {
  CopyStore(dir + "/backup", dir + "/state");
  testing::ClusterOptions no_workers;
  no_workers.workers = 0;
  Cluster cluster(dir, no_workers);
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  StatusOr<v1::ListJobsResponse> listed = cluster.client().ListJobs({});
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 1) << listed->DebugString();
  EXPECT_EQ(listed->jobs(0).id(), id);
}

void ExpectRefusal(const testing::ProcessResult& r, const std::string& file,
                   const std::string& what) {
  EXPECT_FALSE(r.timed_out) << "the coordinator started on a damaged store:\n" << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("job store " + file + " is damaged: " + what));
  EXPECT_THAT(r.err, HasSubstr("restore --state-dir from a backup"));
  EXPECT_THAT(r.err, HasSubstr("sqlite3 -readonly " + fs::path(file).parent_path().string() +
                               "/jobs.db 'PRAGMA integrity_check'"));
  EXPECT_THAT(r.err, HasSubstr("to start with an empty store"));
}

TEST(StoreIntegrityTest, ACoordinatorOnATruncatedStoreExitsNamingItAndStartsOnItsBackup) {
  TempDir dir;
  const std::string id = StoreWithOneJob(dir.path(), SIGTERM);
  ASSERT_FALSE(id.empty());
  const std::string db = dir.File("state/jobs.db");
  ASSERT_GT(fs::file_size(db), 0u);
  CopyStore(dir.File("state"), dir.File("backup"));
  fs::resize_file(db, 0);

  ExpectRefusal(RunCoordinator(dir.path(), dir.File("state")), db, "it is empty (0 bytes)");
  EXPECT_EQ(fs::file_size(db), 0u);  // left for the operator
  ExpectTheRestoredStoreListsTheJob(dir.path(), id);
}

TEST(StoreIntegrityTest, ACoordinatorOnADamagedWalExitsNamingItAndStartsOnItsBackup) {
  TempDir dir;
  const std::string id = StoreWithOneJob(dir.path(), SIGKILL);
  ASSERT_FALSE(id.empty());
  const std::string wal = dir.File("state/jobs.db-wal");
  ASSERT_GT(fs::file_size(wal), 32u) << "the commit is not in the WAL";
  CopyStore(dir.File("state"), dir.File("backup"));
  {  // one bit of the first frame's page: SQLite alone would start with no jobs
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(32 + 24 + 100);
    const char c = static_cast<char>(f.get() ^ 0x04);
    f.seekp(32 + 24 + 100);
    f.put(c);
  }

  ExpectRefusal(RunCoordinator(dir.path(), dir.File("state")), wal,
                "frame 0 (at byte 32) carries this WAL's salts but its checksum does not verify");
  ExpectTheRestoredStoreListsTheJob(dir.path(), id);
}

}  // namespace
}  // namespace trainyard
