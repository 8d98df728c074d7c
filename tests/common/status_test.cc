#include "common/status.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/small_vector.h"

namespace trainyard {
namespace {

StatusOr<int> ParsePositive(int v) {
  if (v <= 0) return InvalidArgumentError("value " + std::to_string(v) + " must be positive");
  return v;
}

Status Doubled(int v, int* out) {
  ASSIGN_OR_RETURN(int x, ParsePositive(v));
  *out = 2 * x;
  return OkStatus();
}

Status Chain(int v) {
  int out = 0;
  RETURN_IF_ERROR(Doubled(v, &out));
  return out > 10 ? OutOfRangeError("too big") : OkStatus();
}

TEST(StatusTest, AssignOrReturnPassesValuesAndErrors) {
  int out = 0;
  EXPECT_TRUE(Doubled(4, &out).ok());
  EXPECT_EQ(out, 8);
  Status s = Doubled(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: value -1 must be positive");
}

TEST(StatusTest, ReturnIfErrorStopsAtTheFirstError) {
  EXPECT_EQ(Chain(-3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Chain(9).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Chain(2).ok());
}

TEST(StatusTest, WithContextKeepsTheCode) {
  Status s = NotFoundError("no file").WithContext("loading x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading x: no file");
}

TEST(StatusDeathTest, ValueOfAnErrorAbortsWithFileAndLine) {
  StatusOr<int> bad = ParsePositive(0);
  EXPECT_DEATH((void)bad.value(), "status.h:[0-9]+: check failed");
}

TEST(CheckDeathTest, CheckPrintsConditionAndMessage) {
  int n = -2;
  EXPECT_DEATH(TY_CHECK(n >= 0) << "size " << n << " is negative",
               "status_test.cc:[0-9]+: check failed: n >= 0: size -2 is negative");
}

TEST(ClockTest, FakeClockMovesOnlyWhenAdvanced) {
  FakeClock clock;
  auto t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(std::chrono::milliseconds(1500));
  EXPECT_DOUBLE_EQ(SecondsBetween(t0, clock.Now()), 1.5);
}

TEST(ClockTest, RealClockIsMonotonic) {
  auto a = Clock::Real()->Now();
  auto b = Clock::Real()->Now();
  EXPECT_LE(a, b);
  EXPECT_GT(Clock::Real()->UnixSeconds(), 1.6e9);
}

TEST(SmallVectorTest, SpillsToTheHeapAndKeepsOrder) {
  SmallVector<std::string, 2> v;
  for (int i = 0; i < 5; ++i) v.push_back(std::to_string(i));
  ASSERT_EQ(v.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(v[i], std::to_string(i));
  v.resize(1);
  EXPECT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "0");
  v.clear();
  EXPECT_TRUE(v.empty());
  v.push_back("x");
  EXPECT_EQ(v[0], "x");
}

TEST(StatusOrTest, HoldsAnEmptyOptionalAsAValue) {
  // StatusOr<std::optional<X>> from std::nullopt is OK and holds an empty optional.
  auto none = []() -> StatusOr<std::optional<std::string>> { return std::nullopt; };
  auto some = []() -> StatusOr<std::optional<std::string>> {
    const std::string path = "step-00000001";
    return path;
  };
  StatusOr<std::optional<std::string>> a = none();
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
  StatusOr<std::optional<std::string>> b = some();
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ(**b, "step-00000001");
}

}  // namespace
}  // namespace trainyard
