// Twenty malformed job specs against a real coordinator: each gets a clear error (the field,
// the value, what is allowed), and the coordinator keeps serving.
#include <gtest/gtest.h>

#include "common/json.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::TempDir;

struct Bad {
  std::string what;
  std::string spec;  // JSON
  StatusCode code;
  std::string expected;  // a part of the message
};

// A valid spec with `field` replaced (a JSON member, or "" to drop nothing).
std::string With(const std::string& members) {
  return R"({"name":"bad","model":{"mlp":{"sizes":[784,16,10]}},"data":{"fashion_mnist":{}},)"
         R"("optimizer":{"sgd":{}},"steps":10)" +
         (members.empty() ? "" : "," + members) + "}";
}

TEST(SpecErrorsTest, TwentyMalformedSpecsEachGetAClearErrorAndTheCoordinatorKeepsServing) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  const std::vector<Bad> bad = {
      {"zero batch", With(R"("batch_size":0)"), kInvalid,
       "batch_size = 0: must be in [1, 1048576]"},
      {"negative batch", With(R"("batch_size":-8)"), kInvalid, "batch_size = -8"},
      {"negative lr",
       R"({"model":{"mlp":{"sizes":[784,10]}},"data":{"fashion_mnist":{}},"optimizer":{"sgd":{"lr":-1}}})",
       kInvalid, "optimizer.sgd.lr = -1"},
      {"zero steps",
       R"({"model":{"mlp":{"sizes":[784,10]}},"data":{"fashion_mnist":{}},"optimizer":{"sgd":{}},"steps":0})",
       kInvalid, "steps = 0"},
      {"steps and epochs", With(R"("epochs":1)"), kInvalid, "steps"},
      {"unknown model",
       R"({"model":{"transformer":{}},"data":{"fashion_mnist":{}},"optimizer":{"sgd":{}}})",
       kInvalid, "transformer"},
      {"unknown dataset",
       R"({"model":{"mlp":{"sizes":[784,10]}},"data":{"imagenet":{}},"optimizer":{"sgd":{}}})",
       kInvalid, "imagenet"},
      {"unknown field", With(R"("epocs":1)"), kInvalid, "did you mean epochs"},
      {"absurd width",
       R"({"model":{"mlp":{"sizes":[784,1000000000000,10]}},"data":{"fashion_mnist":{}},"optimizer":{"sgd":{}}})",
       kInvalid, "model.mlp.sizes"},
      {"absurd gpt",
       R"({"model":{"gpt":{"n_embd":256,"n_head":5}},"data":{"text":{"path":"x.txt"}},"optimizer":{"adamw":{}}})",
       kInvalid, "n_head = 5"},
      {"batch as string", With(R"("batch_size":"big")"), kInvalid, "batch_size"},
      {"sizes as number",
       R"({"model":{"mlp":{"sizes":784}},"data":{"fashion_mnist":{}},"optimizer":{"sgd":{}}})",
       kInvalid, "model.mlp.sizes"},
      {"missing model", R"({"data":{"fashion_mnist":{}},"optimizer":{"sgd":{}}})", kInvalid,
       "model: required"},
      {"not an object", R"([1,2,3])", kInvalid, "expected an object"},
      {"not json", R"({"model": )", kInvalid, "spec_json is not JSON"},
      {"empty", "", kInvalid, "not JSON"},
      {"zero world size", With(R"("parallelism":{"world_size":0})"), kInvalid,
       "parallelism.world_size = 0"},
      {"more ranks than exist", With(R"("parallelism":{"world_size":64})"),
       StatusCode::kFailedPrecondition, "needs 64 CPU slots; the 2 alive workers have 2"},
      {"cuda without gpus", With(R"("device":"cuda")"), StatusCode::kFailedPrecondition,
       "needs 1 GPUs; the 2 alive workers have 0 GPUs"},
      {"too big", With(R"("name":")" + std::string(2 << 20, 'a') + "\""), kInvalid,
       "at most 1048576"},
  };
  ASSERT_EQ(bad.size(), 20u);
  for (const Bad& b : bad) {
    auto job = cluster.client().Submit(b.spec);
    ASSERT_FALSE(job.ok()) << b.what << " was accepted";
    EXPECT_EQ(job.status().code(), b.code) << b.what << ": " << job.status().message();
    EXPECT_NE(job.status().message().find(b.expected), std::string::npos)
        << b.what << ": " << job.status().message();
  }
  // Nothing was queued, and the coordinator still serves.
  auto listed = cluster.client().ListJobs({});
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_EQ(listed->jobs_size(), 0);
  EXPECT_TRUE(cluster.coordinator().running());
}

TEST(SpecErrorsTest, MissingDataFailsTheJobOnceWithTheRanksError) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  // Valid as a spec; the file is missing on the workers, which only they can tell.
  auto job = cluster.client().Submit(
      R"({"name":"nodata","model":{"mlp":{"sizes":[4,3]}},"data":{"csv":{"path":"/nonexistent/x.csv"}},)"
      R"("optimizer":{"sgd":{}},"steps":5,"parallelism":{"world_size":2}})");
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(watch.WaitForState(v1::FAILED, 60s)) << watch.Describe() << cluster.Logs();
  auto failed = cluster.client().GetJob(job->id());
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->restarts(), 0);  // a restart cannot help
  EXPECT_NE(failed->reason().find("exited with code 2"), std::string::npos) << failed->reason();
  EXPECT_NE(failed->reason().find("/nonexistent/x.csv"), std::string::npos) << failed->reason();
}

TEST(SpecErrorsTest, TheCliSubmitPrintsEveryProblemAndExitsTwo) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  {
    std::ofstream(dir.File("bad.yaml"))
        << "model: {mlp: {sizes: [784, 10]}}\ndata: {fashion_mnist: {}}\n"
           "optimizer: {sgd: {lr: -1}}\nbatch_size: 0\n";
  }
  testing::ProcessResult r =
      testing::RunProcess({std::string(TY_BIN_DIR) + "/trainyard", "submit", dir.File("bad.yaml"),
                           "--coordinator", cluster.address()},
                          30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("2 problems"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optimizer.sgd.lr = -1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("batch_size = 0"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace trainyard
