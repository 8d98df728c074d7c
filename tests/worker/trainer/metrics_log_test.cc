#include "worker/trainer/metrics_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "tests/testing/temp_dir.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

std::vector<Json> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<Json> out;
  for (std::string line; std::getline(in, line);) {
    StatusOr<Json> j = Json::Parse(line);
    EXPECT_TRUE(j.ok()) << line;
    if (j.ok()) out.push_back(*j);
  }
  return out;
}

StepMetrics Step(int64_t step, double loss) {
  StepMetrics m;
  m.step = step;
  m.total_steps = 10;
  m.loss = loss;
  m.grad_norm = std::nan("");
  m.samples = 4;
  return m;
}

TEST(MetricsLogTest, WritesOneObjectPerStepAndEvalWithNullForNonFinite) {
  testing::TempDir dir;
  const std::string path = dir.File("metrics.jsonl");
  {
    auto log = MetricsLog::Open(path, 0);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Step(Step(1, 2.5)).ok());
    ASSERT_TRUE((*log)->Step(Step(2, std::nan(""))).ok());
    EvalMetrics e;
    e.step = 2;
    e.loss = 1.5;
    e.accuracy = 0.5;
    ASSERT_TRUE((*log)->Eval(e).ok());
  }
  std::vector<Json> lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(*lines[0].Find("type"), Json("step"));
  EXPECT_EQ(*lines[0].Find("step"), Json(1));
  EXPECT_EQ(*lines[0].Find("loss"), Json(2.5));
  EXPECT_TRUE(lines[0].Find("grad_norm")->is_null());
  EXPECT_TRUE(lines[1].Find("loss")->is_null());
  EXPECT_EQ(*lines[2].Find("type"), Json("eval"));
  EXPECT_EQ(*lines[2].Find("accuracy"), Json(0.5));
  EXPECT_GT(lines[2].Find("time")->number_value(), 1.7e9);
}

TEST(MetricsLogTest, AResumedRunKeepsWhatItsCheckpointCoversAndAFreshOneStartsEmpty) {
  testing::TempDir dir;
  const std::string path = dir.File("metrics.jsonl");
  {
    auto log = MetricsLog::Open(path, 0);
    ASSERT_TRUE(log.ok());
    for (int64_t s = 1; s <= 5; ++s) ASSERT_TRUE((*log)->Step(Step(s, 1.0)).ok());
  }
  { std::ofstream(path, std::ios::app) << "{\"type\":\"step\",\"ste"; }  // a torn last line
  {
    auto log = MetricsLog::Open(path, 3);  // resumed from step 3: steps 4 and 5 come again
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->Step(Step(4, 0.5)).ok());
  }
  std::vector<Json> lines = Lines(path);
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(*lines[i].Find("step"), Json(int64_t(i + 1)));
  EXPECT_EQ(*lines[3].Find("loss"), Json(0.5));
  ASSERT_TRUE(MetricsLog::Open(path, 0).ok());
  EXPECT_TRUE(Lines(path).empty());
}

TEST(MetricsLogTest, NamesAPathItCannotWrite) {
  auto log = MetricsLog::Open("/nonexistent-dir/metrics.jsonl", 0);
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), ::testing::HasSubstr("/nonexistent-dir/metrics.jsonl"));
}

}  // namespace
}  // namespace trainyard::trainer
