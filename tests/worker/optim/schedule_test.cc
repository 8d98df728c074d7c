#include "worker/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/optim/golden_util.h"

namespace trainyard::optim {
namespace {

using test_util::FindGoldenCase;

// The schedule's rates for steps 0.. against the case's "lr" (float32 in the file).
void ExpectRatesMatch(const LrSchedule& schedule, const std::string& case_name) {
  SCOPED_TRACE(case_name);
  const auto* c = FindGoldenCase(case_name);
  if (c == nullptr) return;
  const std::vector<double> want = ToVector<double>(c->at("lr"));
  ASSERT_GT(want.size(), 10u);
  for (size_t step = 0; step < want.size(); ++step) {
    EXPECT_NEAR(schedule.LrAt(step), want[step], 1e-6 * want[step]) << "step " << step;
  }
}

TEST(ScheduleTest, StepScheduleMatchesTorchStepLR) {
  auto s = StepSchedule::Create(0.1, 3, 0.5);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectRatesMatch(**s, "schedule_step");
  EXPECT_EQ((*s)->LrAt(2), 0.1);
  EXPECT_EQ((*s)->LrAt(3), 0.05);
}

TEST(ScheduleTest, CosineScheduleMatchesNanoGptGetLr) {
  auto s = CosineSchedule::Create(6e-4, 5, 30, 6e-5);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectRatesMatch(**s, "schedule_cosine");
  // nanoGPT's formula, evaluated in the same order, to the bit.
  EXPECT_EQ((*s)->LrAt(0), 6e-4 * 1 / 6);
  EXPECT_EQ((*s)->LrAt(5), 6e-4);
  EXPECT_EQ((*s)->LrAt(30), 6e-5);
  EXPECT_EQ((*s)->LrAt(1000), 6e-5);
  const double ratio = 7.0 / 25.0;
  EXPECT_EQ((*s)->LrAt(12), 6e-5 + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (6e-4 - 6e-5));
}

TEST(ScheduleTest, CosineScheduleWithoutWarmupStartsAtMaxLr) {
  auto s = CosineSchedule::Create(6e-4, 0, 12, 6e-5);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectRatesMatch(**s, "schedule_cosine_no_warmup");
  EXPECT_EQ((*s)->LrAt(0), 6e-4);
}

TEST(ScheduleTest, ConstantScheduleIsConstant) {
  auto s = ConstantSchedule::Create(3e-4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->LrAt(0), 3e-4);
  EXPECT_EQ((*s)->LrAt(1000000), 3e-4);
}

TEST(ScheduleTest, BadSettingsAreErrorsNamingTheField) {
  EXPECT_EQ(ConstantSchedule::Create(-1).status().message(),
            "constant schedule: lr is -1; it must be finite and at least 0");
  EXPECT_EQ(StepSchedule::Create(0.1, 0, 0.5).status().message(),
            "step schedule: step_size is 0; it must be at least 1");
  EXPECT_EQ(StepSchedule::Create(0.1, 3, 0).status().message(),
            "step schedule: gamma is 0; it must be finite and positive");
  EXPECT_EQ(CosineSchedule::Create(-1, 0, 10, 0).status().message(),
            "cosine schedule: max_lr is -1; it must be finite and at least 0");
  EXPECT_EQ(CosineSchedule::Create(1e-3, 0, 10, 2e-3).status().message(),
            "cosine schedule: min_lr is 0.002; it must be in [0, 0.001]");
  EXPECT_EQ(CosineSchedule::Create(1e-3, -1, 10, 0).status().message(),
            "cosine schedule: warmup_steps is -1; it must be at least 0");
  EXPECT_EQ(CosineSchedule::Create(1e-3, 10, 10, 0).status().message(),
            "cosine schedule: total_steps is 10; it must be at least 11");
  EXPECT_EQ(CosineSchedule::Create(1e-3, 0, 10, 0).status().code(), StatusCode::kOk);
}

}  // namespace
}  // namespace trainyard::optim
