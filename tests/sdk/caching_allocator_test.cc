// The caching allocator's contract (Note [The caching allocator]) on a fake device
// that hands out host memory and whose events complete when the test says so: it
// runs on every machine, GPU or not. The CUDA suite (cuda_test.cc) checks the real
// device's side when one is there.
#include "cuda/caching_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "strata/error.h"

namespace strata::detail::cuda {
namespace {

using ::testing::HasSubstr;
using strata::cuda::MemoryStats;

constexpr size_t kMiB = 1 << 20;

// Host memory with a capacity, and events that complete by hand (or all at once on
// synchronize). Counts what the allocator asked of it.
class FakeDevice final : public DeviceInterface {
 public:
  struct State {
    size_t capacity = size_t{1} << 40;
    size_t in_use = 0;
    int mallocs = 0, frees = 0, syncs = 0, events_recorded = 0, events_live = 0;
    std::map<void*, size_t> blocks;
    std::vector<std::pair<StreamHandle, bool*>> events;  // stream, done
  };
  explicit FakeDevice(State* state) : s_(state) {}

  void* malloc(size_t nbytes) override {
    if (s_->in_use + nbytes > s_->capacity) return nullptr;
    void* p = std::aligned_alloc(512, nbytes);
    if (p == nullptr) return nullptr;
    std::memset(p, 0xAB, nbytes);
    s_->in_use += nbytes;
    s_->blocks[p] = nbytes;
    ++s_->mallocs;
    return p;
  }
  void free(void* ptr) noexcept override {
    s_->in_use -= s_->blocks.at(ptr);
    s_->blocks.erase(ptr);
    std::free(ptr);
    ++s_->frees;
  }
  EventHandle recordEvent(StreamHandle stream) override {
    bool* done = new bool(false);
    s_->events.emplace_back(stream, done);
    ++s_->events_recorded;
    ++s_->events_live;
    return done;
  }
  bool queryEvent(EventHandle event) override { return *static_cast<bool*>(event); }
  void releaseEvent(EventHandle event) noexcept override {
    for (auto it = s_->events.begin(); it != s_->events.end(); ++it) {
      if (it->second == event) {
        s_->events.erase(it);
        break;
      }
    }
    delete static_cast<bool*>(event);
    --s_->events_live;
  }
  void synchronize() override {
    ++s_->syncs;
    for (auto& [stream, done] : s_->events) *done = true;
  }
  std::pair<size_t, size_t> memoryInfo() override { return {s_->capacity - s_->in_use, s_->capacity}; }
  std::string name() const override { return "fake:0"; }

 private:
  State* s_;
};

// The work queued on a stream so far finishes: its events complete.
void finishWork(FakeDevice::State& s, StreamHandle stream) {
  for (auto& [st, done] : s.events) {
    if (st == stream) *done = true;
  }
}

const StreamHandle kS1 = reinterpret_cast<StreamHandle>(0x1000);
const StreamHandle kS2 = reinterpret_cast<StreamHandle>(0x2000);

class CachingAllocatorTest : public ::testing::Test {
 protected:
  FakeDevice::State dev;
  CachingAllocator alloc{std::make_unique<FakeDevice>(&dev)};
};

TEST_F(CachingAllocatorTest, RoundsSizesAndPicksSegments) {
  EXPECT_EQ(CachingAllocator::roundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::roundSize(512), 512u);
  EXPECT_EQ(CachingAllocator::roundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::segmentSize(512), 2 * kMiB);          // small: a 2 MiB segment
  EXPECT_EQ(CachingAllocator::segmentSize(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segmentSize(kMiB + 512), 20 * kMiB);  // large under 10 MiB: 20 MiB
  EXPECT_EQ(CachingAllocator::segmentSize(10 * kMiB), 10 * kMiB);   // from 10 MiB: its own, by 2 MiB
  EXPECT_EQ(CachingAllocator::segmentSize(11 * kMiB), 12 * kMiB);
  EXPECT_EQ(alloc.allocate(0, kS1), nullptr);
  EXPECT_EQ(dev.mallocs, 0);
}

TEST_F(CachingAllocatorTest, AFreedBlockIsReusedWithoutANewMalloc) {
  void* a = alloc.allocate(4000, kS1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 512, 0u);
  EXPECT_EQ(dev.mallocs, 1);
  alloc.free(a);
  for (int i = 0; i < 100; ++i) {
    void* b = alloc.allocate(4000, kS1);
    EXPECT_EQ(b, a);
    alloc.free(b);
  }
  EXPECT_EQ(dev.mallocs, 1);  // steady state: no new device allocation
  EXPECT_EQ(dev.events_recorded, 0);  // one stream: no event at all
  const MemoryStats st = alloc.stats();
  EXPECT_EQ(st.allocations, 101u);
  EXPECT_EQ(st.device_mallocs, 1u);
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(st.peak_allocated_bytes, 4096u);
}

TEST_F(CachingAllocatorTest, SplitsASegmentAndMergesItBack) {
  // Three small blocks from one 2 MiB segment, at consecutive addresses.
  char* a = static_cast<char*>(alloc.allocate(1000, kS1));
  char* b = static_cast<char*>(alloc.allocate(1000, kS1));
  char* c = static_cast<char*>(alloc.allocate(1000, kS1));
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(b, a + 1024);
  EXPECT_EQ(c, b + 1024);
  EXPECT_EQ(alloc.stats().allocated_bytes, 3 * 1024u);
  // Freeing the middle leaves a 1 KiB hole a 1 KiB request takes, not a larger one.
  alloc.free(b);
  EXPECT_EQ(alloc.allocate(600, kS1), b);
  alloc.free(b);
  alloc.free(a);
  alloc.free(c);
  // All merged: the whole segment serves a 1 MiB request at its start.
  EXPECT_EQ(alloc.allocate(kMiB, kS1), a);
  EXPECT_EQ(dev.mallocs, 1);
  // A large request never comes from the small pool's segment.
  void* big = alloc.allocate(3 * kMiB, kS1);
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(alloc.stats().reserved_bytes, 22 * kMiB);
  // The rest of its 20 MiB segment (17 MiB) serves the next large request.
  void* big2 = alloc.allocate(16 * kMiB, kS1);
  EXPECT_EQ(big2, static_cast<char*>(big) + 3 * kMiB);
  EXPECT_EQ(dev.mallocs, 2);
  alloc.free(a);
  alloc.free(big);
  alloc.free(big2);
}

TEST_F(CachingAllocatorTest, ABlockFreedOnOneStreamIsReusedOnAnotherOnlyAfterItsEvent) {
  // Small blocks of 1 MiB: two fill a 2 MiB segment.
  void* a = alloc.allocate(kMiB, kS1);
  alloc.free(a);
  // Another stream: work queued on s1 may still use a, so it is not handed out.
  void* b = alloc.allocate(kMiB, kS2);
  EXPECT_NE(b, a);
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(dev.events_recorded, 1);  // on s1, after a's last use was queued
  void* b2 = alloc.allocate(kMiB, kS2);  // the rest of s2's segment
  EXPECT_EQ(static_cast<char*>(b2), static_cast<char*>(b) + kMiB);
  void* c = alloc.allocate(kMiB, kS2);  // s1 has not finished: a new segment
  EXPECT_EQ(dev.mallocs, 3);
  alloc.free(b);
  alloc.free(b2);
  alloc.free(c);
  // s1 finishes its work: once s2's own free memory is used up, s1's segment moves to s2.
  finishWork(dev, kS1);
  std::vector<void*> got;
  for (int i = 0; i < 4; ++i) got.push_back(alloc.allocate(kMiB, kS2));
  EXPECT_EQ(dev.mallocs, 3);
  EXPECT_THAT(got, ::testing::Not(::testing::Contains(a)));
  got.push_back(alloc.allocate(kMiB, kS2));
  EXPECT_EQ(got.back(), a);
  EXPECT_EQ(dev.mallocs, 3);
  EXPECT_EQ(dev.events_live, 0);
  for (void* p : got) alloc.free(p);
  EXPECT_EQ(alloc.stats().device_mallocs, 3u);
}

TEST_F(CachingAllocatorTest, NewWorkOnASegmentVoidsItsIdleEvent) {
  void* a = alloc.allocate(kMiB, kS1);
  alloc.free(a);
  alloc.free(alloc.allocate(kMiB, kS2));  // records s1's idle event, takes a new segment
  EXPECT_EQ(dev.events_recorded, 1);
  // s1 uses its segment again after the event: the event no longer covers that use.
  void* again = alloc.allocate(kMiB, kS1);
  EXPECT_EQ(again, a);
  EXPECT_EQ(dev.events_live, 0);
  finishWork(dev, kS1);  // completes nothing: the old event is gone
  alloc.free(again);
  void* x = alloc.allocate(kMiB, kS2);  // s2's own segment, twice
  void* y = alloc.allocate(kMiB, kS2);
  void* z = alloc.allocate(kMiB, kS2);  // s1's segment has no completed event: a new one
  EXPECT_NE(z, a);
  EXPECT_EQ(dev.mallocs, 3);
  EXPECT_EQ(dev.events_recorded, 2);
  alloc.free(x);
  alloc.free(y);
  alloc.free(z);
}

TEST_F(CachingAllocatorTest, RecordStreamHoldsABlockUntilTheOtherStreamsWorkIsDone) {
  void* a = alloc.allocate(4096, kS1);
  alloc.recordStream(a, kS2);
  alloc.recordStream(a, kS2);  // once is enough
  alloc.recordStream(a, kS1);  // its own stream: nothing to wait for
  alloc.free(a);
  EXPECT_EQ(dev.events_recorded, 1);
  // Not reusable even on s1 while s2's work may still read it.
  void* b = alloc.allocate(4096, kS1);
  EXPECT_NE(b, a);
  finishWork(dev, kS2);
  void* c = alloc.allocate(4096, kS1);
  EXPECT_EQ(c, a);
  EXPECT_EQ(dev.mallocs, 1);  // all from one segment
  alloc.free(b);
  alloc.free(c);
  EXPECT_EQ(dev.events_live, 0);
  try {
    alloc.recordStream(b, kS2);
    ADD_FAILURE() << "recordStream accepted freed memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_THAT(e.what(), HasSubstr("is not memory the fake:0 caching allocator handed out"));
  }
}

TEST_F(CachingAllocatorTest, OutOfMemoryFreesTheCacheRetriesThenSaysWhy) {
  dev.capacity = 64 * kMiB;
  void* a = alloc.allocate(30 * kMiB, kS1);
  void* b = alloc.allocate(20 * kMiB, kS1);
  alloc.free(a);  // 30 MiB cached, 20 MiB allocated
  // 40 MiB does not fit beside what is reserved: the cache goes back, then it fits.
  void* c = alloc.allocate(40 * kMiB, kS1);
  ASSERT_NE(c, nullptr);
  MemoryStats st = alloc.stats();
  EXPECT_EQ(st.cache_flushes, 1u);
  EXPECT_EQ(st.device_frees, 1u);
  EXPECT_EQ(st.reserved_bytes, 60 * kMiB);
  EXPECT_GE(dev.syncs, 1);
  // Now nothing helps: a clear error naming the request and the pool's state.
  try {
    alloc.allocate(10 * kMiB, kS2);
    ADD_FAILURE() << "allocated past the device's capacity";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("fake:0 out of memory: tried to allocate 10.00 MiB (10485760 bytes) on stream 0x2000"));
    EXPECT_THAT(m, HasSubstr("the device has 4.00 MiB free of 64.00 MiB"));
    EXPECT_THAT(m, HasSubstr("holds 60.00 MiB reserved in 2 segments, of which 60.00 MiB is allocated to 2 live blocks"));
    EXPECT_THAT(m, HasSubstr("whole free segments were returned to the device and the allocation retried"));
  }
  st = alloc.stats();
  EXPECT_EQ(st.ooms, 1u);
  EXPECT_EQ(st.allocated_bytes, 60 * kMiB);
  // The allocator is intact after the error.
  alloc.free(b);
  alloc.free(c);
  void* d = alloc.allocate(10 * kMiB, kS2);
  EXPECT_NE(d, nullptr);
  alloc.free(d);
  // A request no device could hold fails at once, with no arithmetic overflow.
  try {
    alloc.allocate(~size_t{0} - 10, kS1);
    ADD_FAILURE() << "allocated SIZE_MAX bytes";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("out of memory: tried to allocate"));
  }
}

// The retry after freeing the cache looks in the pool again: waiting for the device
// completed the event that held a record_stream block back, so it is free now.
TEST_F(CachingAllocatorTest, OutOfMemoryLooksInThePoolAgainAfterWaitingForTheDevice) {
  dev.capacity = 2 * kMiB;
  void* a = alloc.allocate(kMiB, kS1);
  void* b = alloc.allocate(kMiB, kS1);  // the rest of the same 2 MiB segment
  ASSERT_EQ(dev.mallocs, 1);
  alloc.recordStream(a, kS2);
  alloc.free(a);  // held back until s2's work is done
  void* c = alloc.allocate(kMiB, kS1);
  EXPECT_EQ(c, a);
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(alloc.stats().ooms, 0u);
  alloc.free(b);
  alloc.free(c);
}

TEST_F(CachingAllocatorTest, StatsCountPeaksAndEmptyCacheReturnsWhatIsFree) {
  void* a = alloc.allocate(100, kS1);  // 512 B in a 2 MiB segment
  void* b = alloc.allocate(5 * kMiB, kS1);  // 5 MiB in a 20 MiB segment
  MemoryStats st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, 512 + 5 * kMiB);
  EXPECT_EQ(st.requested_bytes, 100 + 5 * kMiB);
  EXPECT_EQ(st.reserved_bytes, 22 * kMiB);
  EXPECT_EQ(st.active_blocks, 2u);
  EXPECT_EQ(st.segments, 2u);
  EXPECT_EQ(st.device_mallocs, 2u);
  alloc.free(b);
  st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, 512u);
  EXPECT_EQ(st.peak_allocated_bytes, 512 + 5 * kMiB);
  alloc.resetPeakStats();
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, 512u);
  // empty_cache: the free 20 MiB segment goes back; the one a block still uses stays.
  alloc.emptyCache();
  st = alloc.stats();
  EXPECT_EQ(st.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(st.segments, 1u);
  EXPECT_EQ(st.device_frees, 1u);
  EXPECT_EQ(dev.in_use, 2 * kMiB);
  EXPECT_THAT(st.str(), HasSubstr("allocated 512 B (peak 512 B), reserved 2.00 MiB (peak 22.00 MiB) in 1 segment; "
                                  "2 allocations, 2 cudaMalloc, 1 cudaFree, 0 out of memory"));
  alloc.free(a);
  alloc.emptyCache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  EXPECT_EQ(dev.in_use, 0u);
}

TEST(CachingAllocatorLifetime, DestroyingTheAllocatorReturnsEverySegment) {
  FakeDevice::State dev;
  {
    CachingAllocator alloc(std::make_unique<FakeDevice>(&dev));
    void* a = alloc.allocate(1000, kS1);
    alloc.recordStream(a, kS2);
    alloc.free(a);  // waits for s2's event when the allocator goes
    alloc.free(alloc.allocate(30 * kMiB, kS2));
  }
  EXPECT_EQ(dev.in_use, 0u);
  EXPECT_EQ(dev.mallocs, dev.frees);
  EXPECT_EQ(dev.events_live, 0);
}

// Threads allocating and freeing on their own streams and on a shared one: every
// block handed out is the caller's alone (the pattern it writes is intact when it
// frees), and the books balance. Labelled for the TSan job.
TEST(CachingAllocatorConcurrency, ThreadsOnSeveralStreamsNeverShareABlock) {
  FakeDevice::State dev;
  CachingAllocator alloc(std::make_unique<FakeDevice>(&dev));
  constexpr int kThreads = 4, kIters = 2000;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      const StreamHandle own = reinterpret_cast<StreamHandle>(uintptr_t{0x10000} * (t + 1));
      std::vector<std::pair<unsigned char*, size_t>> held;
      for (int i = 0; i < kIters; ++i) {
        const bool shared = rng() % 4 == 0;
        const size_t n = rng() % 3 == 0 ? (rng() % (3 * kMiB)) + 1 : (rng() % 8192) + 1;
        auto* p = static_cast<unsigned char*>(alloc.allocate(n, shared ? kS1 : own));
        std::memset(p, t + 1, n);
        held.emplace_back(p, n);
        if (held.size() > 8 || rng() % 2 == 0) {
          const size_t k = rng() % held.size();
          auto [q, m] = held[k];
          for (size_t j = 0; j < m; j += 97) {
            if (q[j] != t + 1) ++corrupted;
          }
          alloc.free(q);
          held.erase(held.begin() + static_cast<long>(k));
        }
        if (i % 500 == 0) (void)alloc.stats();
      }
      for (auto [q, m] : held) alloc.free(q);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupted.load(), 0);
  const MemoryStats st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.active_blocks, 0u);
  EXPECT_EQ(st.allocations, static_cast<uint64_t>(kThreads) * kIters);
  alloc.emptyCache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
}

}  // namespace
}  // namespace strata::detail::cuda
