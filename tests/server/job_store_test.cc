#include "server/job_store.h"

#include <sqlite3.h>

#include <memory>
#include <string>
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
