#include "worker/data/data_loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "worker/tensor/factories.h"

namespace trainyard::data {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Sample i has input [i] and target i. Fetches of some samples sleep a little (jitter) so
// that, with several workers, batches finish out of order.
class IndexSource : public BatchSource {
 public:
  explicit IndexSource(int64_t n, bool jitter = false) : n_(n), jitter_(jitter) {}
  int64_t size() const override { return n_; }
  StatusOr<Batch> Fetch(const std::vector<int64_t>& indices) const override {
    fetches_.fetch_add(1);
    if (jitter_ && indices[0] % 3 == 0) std::this_thread::sleep_for(milliseconds(2));
    const auto b = static_cast<int64_t>(indices.size());
    return Batch{FromVector(indices, Shape{b, 1}), FromVector(indices)};
  }
  int fetches() const { return fetches_.load(); }

 private:
  int64_t n_;
  bool jitter_;
  mutable std::atomic<int> fetches_{0};
};

// Fetch blocks until Open() (or 5 s pass, so a broken test cannot hang).
class GatedSource : public IndexSource {
 public:
  explicit GatedSource(int64_t n) : IndexSource(n) {}
  StatusOr<Batch> Fetch(const std::vector<int64_t>& indices) const override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return open_; });
    lock.unlock();
    return IndexSource::Fetch(indices);
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool open_ = false;
};

// Fails any batch holding sample `bad`.
class FailingSource : public IndexSource {
 public:
  FailingSource(int64_t n, int64_t bad) : IndexSource(n), bad_(bad) {}
  StatusOr<Batch> Fetch(const std::vector<int64_t>& indices) const override {
    for (int64_t i : indices) {
      if (i == bad_) return DataLossError("sample " + std::to_string(i) + " is unreadable");
    }
    return IndexSource::Fetch(indices);
  }

 private:
  int64_t bad_;
};

DataLoaderOptions Opts(int64_t batch, int workers, bool drop_last = false, int prefetch = 2) {
  DataLoaderOptions o;
  o.batch_size = batch;
  o.num_workers = workers;
  o.drop_last = drop_last;
  o.prefetch = prefetch;
  return o;
}

// The targets of every remaining batch of the epoch, one vector per batch.
std::vector<std::vector<int64_t>> Drain(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  while (true) {
    StatusOr<std::optional<Batch>> b = loader.Next(std::chrono::seconds(5));
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !b->has_value()) return out;
    EXPECT_EQ(ToVector<int64_t>((*b)->input), ToVector<int64_t>((*b)->target));
    out.push_back(ToVector<int64_t>((*b)->target));
  }
}

std::vector<std::vector<int64_t>> Chunks(const std::vector<int64_t>& v, size_t size) {
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < v.size(); i += size) {
    out.emplace_back(v.begin() + i, v.begin() + std::min(v.size(), i + size));
  }
  return out;
}

TEST(DataLoaderTest, BatchesFollowTheSamplerWhateverTheThreadCount) {
  auto source = std::make_shared<IndexSource>(23, /*jitter=*/true);
  auto sampler = std::make_shared<RandomSampler>(23, 5);
  const auto expected = Chunks(sampler->Indices(2), 4);
  ASSERT_EQ(expected.size(), 6u);
  for (int workers : {0, 1, 3}) {
    DataLoader loader(source, sampler, Opts(4, workers, false, 3));
    ASSERT_TRUE(loader.Reset(2).ok());
    EXPECT_EQ(loader.num_batches(), 6);
    EXPECT_EQ(Drain(loader), expected) << workers << " workers";
    EXPECT_EQ(loader.position(), 23);
  }
}

TEST(DataLoaderTest, DropLastDropsOnlyAShortFinalBatch) {
  auto source = std::make_shared<IndexSource>(10);
  auto sampler = std::make_shared<SequentialSampler>(10);
  DataLoader keep(source, sampler, Opts(4, 2));
  auto kept = Drain(keep);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[2], (std::vector<int64_t>{8, 9}));
  DataLoader drop(source, sampler, Opts(4, 2, /*drop_last=*/true));
  EXPECT_EQ(drop.num_batches(), 2);
  EXPECT_EQ(Drain(drop).size(), 2u);
  DataLoader exact(source, sampler, Opts(5, 0, /*drop_last=*/true));
  EXPECT_EQ(Drain(exact).size(), 2u);
}

TEST(DataLoaderTest, AfterTheEpochNextKeepsReturningNulloptUntilReset) {
  auto source = std::make_shared<IndexSource>(6);
  auto sampler = std::make_shared<RandomSampler>(6, 1);
  DataLoader loader(source, sampler, Opts(3, 1));
  EXPECT_EQ(Drain(loader), Chunks(sampler->Indices(0), 3));
  for (int i = 0; i < 2; ++i) {
    StatusOr<std::optional<Batch>> b = loader.Next(milliseconds(10));
    ASSERT_TRUE(b.ok());
    EXPECT_FALSE(b->has_value());
  }
  ASSERT_TRUE(loader.Reset(1).ok());
  EXPECT_EQ(loader.epoch(), 1u);
  EXPECT_EQ(Drain(loader), Chunks(sampler->Indices(1), 3));
}

TEST(DataLoaderTest, ResettingToASavedPositionResumesExactly) {
  auto source = std::make_shared<IndexSource>(30);
  auto sampler = std::make_shared<RandomSampler>(30, 77);
  DataLoader full(source, sampler, Opts(4, 3));
  ASSERT_TRUE(full.Reset(4).ok());
  const auto all = Drain(full);
  for (int workers : {0, 3}) {
    DataLoader first(source, sampler, Opts(4, workers));
    ASSERT_TRUE(first.Reset(4).ok());
    ASSERT_TRUE(first.Next(std::chrono::seconds(5)).ok());
    ASSERT_TRUE(first.Next(std::chrono::seconds(5)).ok());
    const int64_t saved = first.position();
    EXPECT_EQ(saved, 8);
    // A fresh loader (as after a restart), and the same loader reset mid-epoch.
    DataLoader resumed(source, sampler, Opts(4, workers));
    ASSERT_TRUE(resumed.Reset(4, saved).ok());
    EXPECT_EQ(Drain(resumed), std::vector<std::vector<int64_t>>(all.begin() + 2, all.end()));
    ASSERT_TRUE(first.Reset(4, saved).ok());
    EXPECT_EQ(first.position(), 8);
    EXPECT_EQ(Drain(first), std::vector<std::vector<int64_t>>(all.begin() + 2, all.end()));
  }
}

TEST(DataLoaderTest, WorkersRunAtMostPrefetchAheadAndStopPromptly) {
  auto source = std::make_shared<IndexSource>(100);
  auto sampler = std::make_shared<SequentialSampler>(100);
  auto loader = std::make_unique<DataLoader>(source, sampler, Opts(1, 3, false, 2));
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (source->fetches() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  std::this_thread::sleep_for(milliseconds(30));  // let the workers block on the full queue
  EXPECT_EQ(source->fetches(), 2);
  const auto start = Clock::now();
  ASSERT_TRUE(loader->Reset(0, 50).ok());  // stops the blocked workers, starts new ones
  loader.reset();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 0.5);
}

TEST(DataLoaderTest, NextTimesOutWhenTheDatasetStallsAndLaterDelivers) {
  auto source = std::make_shared<GatedSource>(4);
  auto sampler = std::make_shared<SequentialSampler>(4);
  DataLoader loader(source, sampler, Opts(2, 1));
  const auto start = Clock::now();
  StatusOr<std::optional<Batch>> b = loader.Next(milliseconds(30));
  EXPECT_GE(Clock::now() - start, milliseconds(30));
  EXPECT_EQ(b.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(b.status().message().find("batch 0 of epoch 0"), std::string::npos) << b.status();
  source->Open();
  b = loader.Next(std::chrono::seconds(5));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ(ToVector<int64_t>((*b)->target), (std::vector<int64_t>{0, 1}));
}

TEST(DataLoaderTest, AStartPositionOutsideTheEpochIsRejectedWithoutChange) {
  auto source = std::make_shared<IndexSource>(10);
  auto sampler = std::make_shared<SequentialSampler>(10);
  DataLoader loader(source, sampler, Opts(4, 1));
  ASSERT_TRUE(loader.Reset(3, 10).ok());  // the end of the epoch is a valid place to resume
  Status s = loader.Reset(4, 11);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("start position 11"), std::string::npos) << s;
  EXPECT_FALSE(loader.Reset(4, -1).ok());
  EXPECT_EQ(loader.epoch(), 3u);
  EXPECT_EQ(loader.position(), 10);
}

TEST(DataLoaderTest, ADatasetErrorNamesTheBatchAndStaysUntilReset) {
  auto source = std::make_shared<FailingSource>(10, 5);
  auto sampler = std::make_shared<SequentialSampler>(10);
  for (int workers : {0, 2}) {
    DataLoader loader(source, sampler, Opts(2, workers));
    ASSERT_TRUE(loader.Next(std::chrono::seconds(5)).ok());
    ASSERT_TRUE(loader.Next(std::chrono::seconds(5)).ok());
    StatusOr<std::optional<Batch>> b = loader.Next(std::chrono::seconds(5));
    EXPECT_EQ(b.status().code(), StatusCode::kDataLoss);
    const std::string& m = b.status().message();
    EXPECT_NE(m.find("batch 2 of epoch 0"), std::string::npos) << m;
    EXPECT_NE(m.find("sample 5 is unreadable"), std::string::npos) << m;
    EXPECT_EQ(loader.Next(std::chrono::seconds(5)).status(), b.status());
    ASSERT_TRUE(loader.Reset(0).ok());
    StatusOr<std::optional<Batch>> again = loader.Next(std::chrono::seconds(5));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(ToVector<int64_t>((*again)->target), (std::vector<int64_t>{0, 1}));
  }
}

}  // namespace
}  // namespace trainyard::data
