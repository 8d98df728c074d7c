// TcpStoreServer + TcpStore behind the Store interface, serving the store core
// (common/rendezvous.h, whose own tests are tests/common/rendezvous_test.cc), plus PrefixStore.
// Timeouts are 100 ms.
#include "worker/dist/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <limits>
#include <thread>

namespace trainyard::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kShort{100};
constexpr milliseconds kLong{10000};

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A live TCP server with a client.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = TcpStoreServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    store_ = Open();
    ASSERT_NE(store_, nullptr);
  }
  // Another client of the same store (a second process would do the same).
  std::shared_ptr<Store> Open() {
    StatusOr<std::shared_ptr<Store>> s = TcpStore::Connect(server_->address(), kLong);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : nullptr;
  }

  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
};

TEST_F(StoreTest, GetReturnsWhatSetStored) {
  ASSERT_TRUE(store_->Set("a", "1").ok());
  ASSERT_TRUE(store_->Set("a", "2").ok());  // replaces
  auto v = Open()->Get("a", kShort);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "2");
}

TEST_F(StoreTest, ValuesAreBinaryAndKeysMayHoldSlashes) {
  std::string value(1 << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 131);
  ASSERT_TRUE(store_->Set("job/1/attempt/../x y", value).ok());
  auto v = store_->Get("job/1/attempt/../x y", kShort);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, value);
  // As the coordinator's store: keys are 1 to 1024 bytes.
  EXPECT_EQ(store_->Set("", "empty key").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Get("job/1/attempt/x y", milliseconds(0)).status().code(),
            StatusCode::kDeadlineExceeded);
}

TEST_F(StoreTest, GetWaitsForAKeySetLater) {
  auto other = Open();
  auto got = std::async(std::launch::async, [&] { return store_->Get("late", kLong); });
  ASSERT_TRUE(other->Set("late", "here").ok());
  auto v = got.get();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "here");
}

TEST_F(StoreTest, GetTimesOutNamingTheKey) {
  const auto t0 = Clock::now();
  auto v = store_->Get("never", kShort);
  const double took = SecondsSince(t0);
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded) << v.status();
  EXPECT_NE(v.status().message().find("\"never\""), std::string::npos) << v.status();
  EXPECT_NE(v.status().message().find("100ms"), std::string::npos) << v.status();
  EXPECT_GE(took, 0.09);
  EXPECT_LT(took, 1.0);
}

TEST_F(StoreTest, WaitNamesOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->Set("k0", "").ok());
  ASSERT_TRUE(store_->Set("k2", "").ok());
  EXPECT_TRUE(store_->Wait({"k0", "k2"}, kShort).ok());
  const auto t0 = Clock::now();
  Status st = store_->Wait({"k0", "k1", "k2", "k3"}, kShort);
  EXPECT_LT(SecondsSince(t0), 1.0);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("\"k1\", \"k3\""), std::string::npos) << st;
  EXPECT_EQ(st.message().find("\"k0\""), std::string::npos) << st;
}

TEST_F(StoreTest, WaitReturnsOnceTheLastKeyIsSet) {
  ASSERT_TRUE(store_->Set("x", "").ok());
  auto waited = std::async(std::launch::async, [&] { return store_->Wait({"x", "y"}, kLong); });
  ASSERT_TRUE(Open()->Set("y", "").ok());
  EXPECT_TRUE(waited.get().ok());
}

TEST_F(StoreTest, AddIsAtomicAcrossClientsAndThreads) {
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto store = t % 2 == 0 ? store_ : Open();
      for (int i = 0; i < kAdds; ++i) ASSERT_TRUE(store->Add("counter", 1).ok());
    });
  }
  for (auto& th : threads) th.join();
  auto sum = store_->Add("counter", 0);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, kThreads * kAdds);
  EXPECT_EQ(*store_->Add("fresh", -7), -7);
  EXPECT_EQ(*store_->Get("counter", kShort), std::to_string(kThreads * kAdds));
}

TEST_F(StoreTest, AddToANonIntegerIsFailedPrecondition) {
  ASSERT_TRUE(store_->Set("text", "abc").ok());
  auto sum = store_->Add("text", 1);
  EXPECT_EQ(sum.status().code(), StatusCode::kFailedPrecondition) << sum.status();
  EXPECT_NE(sum.status().message().find("\"text\""), std::string::npos) << sum.status();
}

TEST_F(StoreTest, AddPastTheInt64LimitsIsInvalidArgumentAndKeepsTheValue) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ASSERT_EQ(*store_->Add("n", kMax), kMax);
  auto sum = store_->Add("n", 1);
  EXPECT_EQ(sum.status().code(), StatusCode::kInvalidArgument) << sum.status();
  const std::string message(sum.status().message());
  EXPECT_NE(message.find("\"n\""), std::string::npos) << message;
  EXPECT_NE(message.find("holds 9223372036854775807; adding 1 would overflow"), std::string::npos)
      << message;
  EXPECT_EQ(*store_->Get("n", kShort), std::to_string(kMax));

  ASSERT_EQ(*store_->Add("low", std::numeric_limits<int64_t>::min()),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(store_->Add("low", -1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, PrefixStoresDoNotSeeEachOther) {
  auto a = std::make_shared<PrefixStore>("job/1/attempt/0/", store_);
  auto b = std::make_shared<PrefixStore>("job/1/attempt/1/", store_);
  ASSERT_TRUE(a->Set("rank0", "a").ok());
  EXPECT_EQ(b->Get("rank0", milliseconds(0)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(*store_->Get("job/1/attempt/0/rank0", kShort), "a");
  EXPECT_EQ(*a->Add("n", 2), 2);
  EXPECT_EQ(*b->Add("n", 5), 5);
  EXPECT_TRUE(a->Wait({"rank0", "n"}, kShort).ok());
  Status st = b->Wait({"rank0"}, kShort);
  EXPECT_NE(st.message().find("job/1/attempt/1/rank0"), std::string::npos) << st;
}

TEST_F(StoreTest, KeysAndValuesOverTheCoresLimitsAreRefusedNamingThem) {
  const std::string long_key(1025, 'k');
  Status st = store_->Set(long_key, "v");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("1025 bytes: must be 1 to 1024"), std::string::npos) << st;
  st = store_->Set("big", std::string((1 << 20) + 1, 'v'));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("\"big\""), std::string::npos) << st;
  EXPECT_EQ(store_->Get("big", milliseconds(0)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(store_->Get(long_key, milliseconds(0)).status().code(), StatusCode::kInvalidArgument);
}

// ---- TCP only ----

TEST(TcpStoreTest, OneClientServesManyThreadsAtOnce) {
  auto server = TcpStoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = TcpStore::Connect((*server)->address(), kLong);
  ASSERT_TRUE(store.ok()) << store.status();
  // A Get parked on the server must not block the Set that releases it.
  auto got = std::async(std::launch::async, [&] { return (*store)->Get("k", kLong); });
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  EXPECT_EQ(*got.get(), "v");
  EXPECT_EQ((*store)->LocalAddressHint(), "127.0.0.1");
}

TEST(TcpStoreTest, ServerGoneIsUnavailableNotAHang) {
  auto server = TcpStoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = TcpStore::Connect((*server)->address(), kLong);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  // Parked on the server when it goes away.
  auto parked = std::async(std::launch::async, [&] { return (*store)->Get("never", kLong); });
  ASSERT_TRUE((*store)->Set("k2", "v").ok());  // the server is serving both connections
  const auto t0 = Clock::now();
  server->reset();
  const Status st = parked.get().status();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_EQ((*store)->Set("k", "v").code(), StatusCode::kUnavailable);
  EXPECT_EQ((*store)->Wait({"k"}, kShort).code(), StatusCode::kUnavailable);
  EXPECT_LT(SecondsSince(t0), 1.0);
}

TEST(TcpStoreTest, ConnectGivesUpWithUnavailableNamingTheAddress) {
  std::string address;
  {
    auto server = TcpStoreServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    address = (*server)->address();
  }  // nothing listens there now
  const auto t0 = Clock::now();
  auto store = TcpStore::Connect(address, kShort);
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status();
  EXPECT_NE(store.status().message().find(address), std::string::npos) << store.status();
  EXPECT_LT(SecondsSince(t0), 1.0);
  EXPECT_EQ(TcpStore::Connect("no-port", kShort).status().code(), StatusCode::kInvalidArgument);
}

TEST(TcpStoreTest, ConnectRetriesUntilTheServerIsUp) {
  // Find a free port, then start the server on it while the client is already retrying.
  int port = 0;
  {
    auto probe = TcpStoreServer::Start();
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  auto client = std::async(std::launch::async, [&] {
    return TcpStore::Connect("127.0.0.1:" + std::to_string(port), kLong);
  });
  auto server = TcpStoreServer::Start("127.0.0.1", port);
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = client.get();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Set("up", "1").ok());
}

TEST(TcpStoreTest, StartOnABusyPortNamesTheAddress) {
  auto server = TcpStoreServer::Start();
  ASSERT_TRUE(server.ok());
  auto second = TcpStoreServer::Start("127.0.0.1", (*server)->port());
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(std::to_string((*server)->port())), std::string::npos)
      << second.status();
}

TEST(FormatDurationTest, ReadsAsPeopleWriteIt) {
  EXPECT_EQ(FormatDuration(milliseconds(100)), "100ms");
  EXPECT_EQ(FormatDuration(milliseconds(1500)), "1.5s");
  EXPECT_EQ(FormatDuration(milliseconds(5000)), "5s");
  EXPECT_EQ(FormatDuration(std::chrono::minutes(10)), "10m");
}

}  // namespace
}  // namespace trainyard::dist
