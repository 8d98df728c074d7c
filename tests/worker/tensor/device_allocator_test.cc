#include "worker/tensor/device_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMiB = size_t{1} << 20;

// A device of `limit` bytes over host memory. Events complete only when the test says so.
class FakeRuntime final : public DeviceRuntime {
 public:
  explicit FakeRuntime(size_t limit = SIZE_MAX) : limit_(limit) {}
  ~FakeRuntime() override {
    for (auto& e : events_) delete e;
  }

  Status Malloc(size_t nbytes, void** out) override {
    ++mallocs;
    if (nbytes > limit_ - in_use) {
      return ResourceExhaustedError("fake device has " + std::to_string(limit_ - in_use) +
                                    " bytes free");
    }
    in_use += nbytes;
    sizes_.push_back({* out = std::malloc(nbytes), nbytes});
    return OkStatus();
  }
  void Free(void* ptr) override {
    ++frees;
    for (auto it = sizes_.begin(); it != sizes_.end(); ++it) {
      if (it->first != ptr) continue;
      in_use -= it->second;
      sizes_.erase(it);
      std::free(ptr);
      return;
    }
    ADD_FAILURE() << "Free of a pointer the fake device never returned";
  }
  struct FakeEvent {
    Stream stream = nullptr;
    bool done = true;
  };
  Event CreateEvent() override {
    events_.push_back(new FakeEvent);
    return events_.back();
  }
  void DestroyEvent(Event) override {}
  void RecordEvent(Event e, Stream s) override {
    auto* fe = static_cast<FakeEvent*>(e);
    fe->stream = s;
    fe->done = false;  // the stream still has work queued
    recorded.push_back(fe);
  }
  bool EventQuery(Event e) override { return static_cast<FakeEvent*>(e)->done; }
  void EventSynchronize(Event e) override { static_cast<FakeEvent*>(e)->done = true; }

  // Marks every event recorded on `s` as reached.
  void Finish(Stream s) {
    for (FakeEvent* e : recorded)
      if (e->stream == s) e->done = true;
  }

  int mallocs = 0, frees = 0;
  size_t in_use = 0;
  std::vector<FakeEvent*> recorded;

 private:
  size_t limit_;
  std::vector<std::pair<void*, size_t>> sizes_;
  std::vector<FakeEvent*> events_;
};

// Two distinct stream handles.
int stream_a_tag, stream_b_tag;
DeviceRuntime::Stream const kStreamA = &stream_a_tag;
DeviceRuntime::Stream const kStreamB = &stream_b_tag;

TEST(DeviceAllocatorTest, ReusesAFreedBlockOfTheSameSizeClassOnTheSameStream) {
  FakeRuntime rt;
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  ASSERT_EQ(DeviceCachingAllocator::RoundSize(1000), DeviceCachingAllocator::RoundSize(900));
  void* p = *alloc.Allocate(1000, kStreamA);
  alloc.Free(p);
  EXPECT_EQ(*alloc.Allocate(900, kStreamA), p);
  EXPECT_EQ(rt.mallocs, 1);
  EXPECT_EQ(alloc.Stats().num_allocs, 2);
  EXPECT_EQ(alloc.Stats().num_device_allocs, 1);
}

TEST(DeviceAllocatorTest, DoesNotHandAFreedBlockToAnotherStream) {
  FakeRuntime rt;
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  void* p = *alloc.Allocate(4096, kStreamA);
  alloc.Free(p);
  void* q = *alloc.Allocate(4096, kStreamB);
  EXPECT_NE(q, p);
  EXPECT_EQ(rt.mallocs, 2);
  EXPECT_EQ(*alloc.Allocate(4096, kStreamA), p);  // still cached for its own stream
}

TEST(DeviceAllocatorTest, RecordStreamDelaysReuseUntilTheOtherStreamPassesTheFree) {
  FakeRuntime rt;
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  void* p = *alloc.Allocate(4096, kStreamA);
  alloc.RecordStream(p, kStreamB);  // say, an all-reduce on a side stream reads it
  alloc.Free(p);
  ASSERT_EQ(rt.recorded.size(), 1u);
  EXPECT_EQ(rt.recorded[0]->stream, kStreamB);
  void* q = *alloc.Allocate(4096, kStreamA);
  EXPECT_NE(q, p) << "reused while stream B may still read it";
  rt.Finish(kStreamB);
  EXPECT_EQ(*alloc.Allocate(4096, kStreamA), p);
  EXPECT_EQ(rt.mallocs, 2);
}

TEST(DeviceAllocatorTest, RecordStreamOnTheOwnStreamNeedsNoEvent) {
  FakeRuntime rt;
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  void* p = *alloc.Allocate(4096, kStreamA);
  alloc.RecordStream(p, kStreamA);
  alloc.Free(p);
  EXPECT_TRUE(rt.recorded.empty());
  EXPECT_EQ(*alloc.Allocate(4096, kStreamA), p);
}

TEST(DeviceAllocatorTest, StatsCountAllocatedReservedCachedAndPeakBytes) {
  FakeRuntime rt;
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  const int64_t a = DeviceCachingAllocator::RoundSize(3000);
  const int64_t b = DeviceCachingAllocator::RoundSize(70000);
  void* p = *alloc.Allocate(3000, kStreamA);
  void* q = *alloc.Allocate(70000, kStreamA);
  DeviceAllocatorStats s = alloc.Stats();
  EXPECT_EQ(s.allocated_bytes, a + b);
  EXPECT_EQ(s.reserved_bytes, a + b);
  EXPECT_EQ(s.cached_bytes, 0);
  alloc.Free(q);
  s = alloc.Stats();
  EXPECT_EQ(s.allocated_bytes, a);
  EXPECT_EQ(s.cached_bytes, b);
  EXPECT_EQ(s.reserved_bytes, a + b);
  EXPECT_EQ(s.peak_allocated_bytes, a + b);
  alloc.ResetPeak();
  EXPECT_EQ(alloc.Stats().peak_allocated_bytes, a);
  alloc.EmptyCache();
  s = alloc.Stats();
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, a);
  EXPECT_EQ(rt.in_use, static_cast<size_t>(a));
  alloc.Free(p);
  EXPECT_EQ(alloc.Allocate(0, kStreamA).value(), nullptr);
}

TEST(DeviceAllocatorTest, OutOfMemoryEmptiesTheCacheOnceAndRetries) {
  FakeRuntime rt(3 * kMiB);
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  void* held = *alloc.Allocate(kMiB, kStreamA);
  alloc.Free(*alloc.Allocate(2 * kMiB, kStreamB));         // 2 MiB cached for stream B
  StatusOr<void*> p = alloc.Allocate(2 * kMiB, kStreamA);  // needs B's cached block's room
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(alloc.Stats().num_cache_flushes, 1);
  EXPECT_EQ(alloc.Stats().cached_bytes, 0);
  EXPECT_EQ(rt.mallocs, 4);  // held, B's block, the failed try, the retry
  EXPECT_EQ(rt.frees, 1);
  alloc.Free(*p);
  alloc.Free(held);
}

TEST(DeviceAllocatorTest, OutOfMemoryAfterTheFlushIsResourceExhaustedNamingTheSizes) {
  FakeRuntime rt(3 * kMiB);
  DeviceCachingAllocator alloc(&rt, "cuda:1");
  void* held = *alloc.Allocate(2 * kMiB, kStreamA);
  alloc.Free(*alloc.Allocate(kMiB, kStreamA));  // 1 MiB cached
  StatusOr<void*> p = alloc.Allocate(3 * kMiB, kStreamA);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(p.status().message(), HasSubstr("cuda:1: out of memory allocating 3.0 MiB"));
  EXPECT_THAT(p.status().message(), HasSubstr("2.0 MiB allocated by tensors"));
  EXPECT_THAT(p.status().message(), HasSubstr("fake device has"));
  EXPECT_EQ(alloc.Stats().num_cache_flushes, 1);
  EXPECT_EQ(rt.mallocs, 4);  // held, the cached block, one try, one retry after the flush
  alloc.Free(held);
}

TEST(DeviceAllocatorTest, AByteCountNoDeviceHoldsIsResourceExhaustedNotANullBlock) {
  FakeRuntime rt;
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  // A negative size cast to size_t: rounding it up to a size class would wrap to 0.
  StatusOr<void*> p = alloc.Allocate(SIZE_MAX - 4095, kStreamA);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(p.status().message(), HasSubstr("cuda:0: cannot allocate"));
  EXPECT_EQ(rt.mallocs, 0);
}

TEST(DeviceAllocatorTest, OutOfMemoryWithAnEmptyCacheFailsWithoutAFlush) {
  FakeRuntime rt(kMiB);
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  StatusOr<void*> p = alloc.Allocate(2 * kMiB, kStreamA);
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(alloc.Stats().num_cache_flushes, 0);
  EXPECT_EQ(rt.mallocs, 1);
}

TEST(DeviceAllocatorTest, PendingBlocksAreWaitedForWhenTheCacheIsFlushed) {
  FakeRuntime rt(2 * kMiB);
  DeviceCachingAllocator alloc(&rt, "cuda:0");
  void* p = *alloc.Allocate(2 * kMiB, kStreamA);
  alloc.RecordStream(p, kStreamB);
  alloc.Free(p);  // pending on stream B's event
  StatusOr<void*> q = alloc.Allocate(kMiB, kStreamA);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_TRUE(rt.recorded[0]->done) << "the flush must synchronise on the pending event";
  EXPECT_EQ(alloc.Stats().num_cache_flushes, 1);
  alloc.Free(*q);
}

}  // namespace
}  // namespace trainyard
