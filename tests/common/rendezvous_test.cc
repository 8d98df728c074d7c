#include "common/rendezvous.h"

#include <chrono>
#include <future>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Bounds every cross-thread wait; a passing test never waits this long.
constexpr auto kLong = 10s;

class RendezvousTest : public ::testing::Test {
 protected:
  RendezvousTest() { store_.Open(scope_); }

  Rendezvous store_;
  const Rendezvous::Scope scope_{"job-1", 1, "s3cret"};
};

TEST_F(RendezvousTest, GetReturnsWhatSetStored) {
  ASSERT_TRUE(store_.Set(scope_, "addr/0", "10.0.0.1:4000").ok());
  StatusOr<std::string> got = store_.Get(scope_, "addr/0", 0ms);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "10.0.0.1:4000");

  ASSERT_TRUE(store_.Set(scope_, "addr/0", "10.0.0.2:4000").ok());
  EXPECT_EQ(*store_.Get(scope_, "addr/0", 0ms), "10.0.0.2:4000");
}

TEST_F(RendezvousTest, GetWaitsForALaterSetFromAnotherThread) {
  std::promise<void> started;
  auto getter = std::async(std::launch::async, [&] {
    started.set_value();
    return store_.Get(scope_, "nccl_id", kLong);
  });
  started.get_future().wait();
  ASSERT_TRUE(store_.Set(scope_, "nccl_id", "abc").ok());
  ASSERT_EQ(getter.wait_for(kLong), std::future_status::ready);
  StatusOr<std::string> got = getter.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "abc");
}

TEST_F(RendezvousTest, WaitReturnsOnceEveryKeyIsSet) {
  auto waiter = std::async(std::launch::async, [&] {
    return store_.Wait(scope_, {"a", "b"}, kLong);
  });
  ASSERT_TRUE(store_.Set(scope_, "a", "1").ok());
  ASSERT_TRUE(store_.Set(scope_, "b", "2").ok());
  ASSERT_EQ(waiter.wait_for(kLong), std::future_status::ready);
  EXPECT_TRUE(waiter.get().ok());
}

TEST_F(RendezvousTest, GetOfAKeyNobodySetsTimesOut) {
  StatusOr<std::string> got = store_.Get(scope_, "never", 20ms);
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("never"));

  ASSERT_TRUE(store_.Set(scope_, "a", "1").ok());
  Status waited = store_.Wait(scope_, {"a", "b"}, 20ms);
  EXPECT_EQ(waited.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(waited.message(), HasSubstr(": \"b\""));  // names only the missing key
}

TEST_F(RendezvousTest, WrongSecretIsPermissionDenied) {
  ASSERT_TRUE(store_.Set(scope_, "k", "v").ok());
  const Rendezvous::Scope wrong{"job-1", 1, "guess"};
  EXPECT_EQ(store_.Set(wrong, "k", "x").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(store_.Get(wrong, "k", 0ms).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(store_.Add(wrong, "n", 1).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(*store_.Get(scope_, "k", 0ms), "v");  // the wrong secret changed nothing
}

TEST_F(RendezvousTest, ClosedOrNeverOpenedScopeIsNotFound) {
  const Rendezvous::Scope next{"job-1", 2, "s3cret"};
  EXPECT_EQ(store_.Set(next, "k", "v").code(), StatusCode::kNotFound);

  ASSERT_TRUE(store_.Set(scope_, "k", "v").ok());
  store_.Close("job-1", 1);
  EXPECT_EQ(store_.Get(scope_, "k", 0ms).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_.Set(scope_, "k", "v").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_.Add(scope_, "n", 1).status().code(), StatusCode::kNotFound);
}

TEST_F(RendezvousTest, CloseWakesAWaiterWithNotFound) {
  std::promise<void> started;
  auto getter = std::async(std::launch::async, [&] {
    started.set_value();
    return store_.Get(scope_, "never", kLong);
  });
  started.get_future().wait();
  store_.Close("job-1", 1);
  ASSERT_EQ(getter.wait_for(kLong), std::future_status::ready);
  EXPECT_EQ(getter.get().status().code(), StatusCode::kNotFound);
}

TEST_F(RendezvousTest, AttemptsHaveSeparateKeys) {
  const Rendezvous::Scope second{"job-1", 2, "other"};
  store_.Open(second);
  ASSERT_TRUE(store_.Set(scope_, "k", "first").ok());
  EXPECT_EQ(store_.Get(second, "k", 0ms).status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(RendezvousTest, AddCountsFromZero) {
  EXPECT_EQ(*store_.Add(scope_, "arrived", 1), 1);
  EXPECT_EQ(*store_.Add(scope_, "arrived", 2), 3);
  EXPECT_EQ(*store_.Add(scope_, "arrived", -1), 2);
  EXPECT_EQ(*store_.Get(scope_, "arrived", 0ms), "2");

  ASSERT_TRUE(store_.Set(scope_, "name", "gloo").ok());
  EXPECT_EQ(store_.Add(scope_, "name", 1).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(RendezvousTest, AddPastTheInt64LimitsIsInvalidArgumentAndKeepsTheValue) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  ASSERT_EQ(*store_.Add(scope_, "n", kMax - 1), kMax - 1);
  EXPECT_EQ(*store_.Add(scope_, "n", 1), kMax) << "the largest sum is allowed";
  StatusOr<int64_t> sum = store_.Add(scope_, "n", 1);
  EXPECT_EQ(sum.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sum.status().message(),
            "rendezvous key \"n\" holds 9223372036854775807; adding 1 would overflow a 64-bit "
            "integer; use a new key");
  EXPECT_EQ(*store_.Get(scope_, "n", 0ms), std::to_string(kMax));

  ASSERT_EQ(*store_.Add(scope_, "low", kMin), kMin);
  EXPECT_EQ(store_.Add(scope_, "low", -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store_.Get(scope_, "low", 0ms), std::to_string(kMin));
  // A value set out of int64's range is not an integer it can add to.
  ASSERT_TRUE(store_.Set(scope_, "huge", "99999999999999999999").ok());
  EXPECT_EQ(store_.Add(scope_, "huge", -1).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(RendezvousTest, RefusesKeysOverTheLimits) {
  EXPECT_EQ(store_.Set(scope_, "", "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Set(scope_, std::string(Rendezvous::kMaxKeyBytes + 1, 'k'), "v").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Set(scope_, "k", std::string(Rendezvous::kMaxValueBytes + 1, 'v')).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard
