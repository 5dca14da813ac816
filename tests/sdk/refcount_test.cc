// Biased reference counts (Note [Biased reference counts] in intrusive_ptr.h), as
// an owner of handles observes them: every object is destroyed exactly once, never
// while a handle to it lives, whichever threads copied and dropped its handles and
// in whatever order, and whether its creating thread is alive or not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "../dispatch/test_util.h"
#include "sanitized.h"
#include "strata/dispatcher.h"
#include "strata/intrusive_ptr.h"
#include "strata/library.h"
#include "strata/storage.h"
#include "strata/sym_int.h"
#include "strata/tensor.h"

namespace strata {
namespace {

std::atomic<int> g_made{0};
std::atomic<int> g_destroyed{0};

struct Counted : intrusive_ptr_target {
  explicit Counted(int v) : value(v) { ++g_made; }
  ~Counted() override {
    EXPECT_NE(value, -1) << "destroyed twice";
    value = -1;
    ++g_destroyed;
  }
  int value;
};
using Ptr = intrusive_ptr<Counted>;

class RefcountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    release_queued_references();
    g_made = 0;
    g_destroyed = 0;
  }
};

TEST_F(RefcountTest, OneThreadFreesWithTheLastHandle) {
  Ptr a = make_intrusive<Counted>(1);
  EXPECT_EQ(a.use_count(), 1u);
  {
    Ptr b = a;
    Ptr c = b;
    EXPECT_EQ(a.use_count(), 3u);
  }
  EXPECT_EQ(a.use_count(), 1u);
  Ptr moved = std::move(a);
  EXPECT_EQ(moved.use_count(), 1u);
  EXPECT_EQ(g_destroyed.load(), 0);
  Counted* raw = moved.release();
  EXPECT_EQ(g_destroyed.load(), 0);
  Ptr back = Ptr::reclaim(raw);
  back.reset();
  EXPECT_EQ(g_destroyed.load(), 1);
}

// Another thread copies from a handle it can see and drops its copies: the counts
// of both threads add up, and the owner's last drop frees the object.
TEST_F(RefcountTest, CopiesMadeOnOtherThreadsAreCounted) {
  Ptr a = make_intrusive<Counted>(1);
  std::vector<Ptr> theirs;
  std::thread t([&] {
    for (int i = 0; i < 3; ++i) theirs.push_back(a);
  });
  t.join();
  EXPECT_EQ(a.use_count(), 4u);
  std::thread([&] { theirs.clear(); }).join();
  EXPECT_EQ(a.use_count(), 1u);
  a.reset();
  EXPECT_EQ(g_destroyed.load(), 1);
}

// The owner gives a handle away and drops its own first: the other thread's drop is
// the last one. The object is freed, by the owner's next allocation or when asked.
TEST_F(RefcountTest, TheLastDropOnAnotherThreadFreesOnceTheOwnerMerges) {
  Ptr a = make_intrusive<Counted>(1);
  Ptr given = a;
  a.reset();
  EXPECT_EQ(given.use_count(), 1u);
  std::thread([p = std::move(given)]() mutable { p.reset(); }).join();
  EXPECT_EQ(g_destroyed.load(), 0);  // queued to this thread
  EXPECT_EQ(release_queued_references(), 1u);
  EXPECT_EQ(g_destroyed.load(), 1);
  // The next object this thread makes merges the queue as well.
  Ptr b = make_intrusive<Counted>(2);
  Ptr c = b;
  b.reset();
  std::thread([p = std::move(c)]() mutable { p.reset(); }).join();
  EXPECT_EQ(g_destroyed.load(), 1);
  Ptr d = make_intrusive<Counted>(3);
  EXPECT_EQ(g_destroyed.load(), 2);
}

// A handle dropped on another thread while the owner still holds one: nothing is
// freed, and the owner's count stays right.
TEST_F(RefcountTest, ADropElsewhereWhileTheOwnerHoldsOneFreesNothing) {
  Ptr a = make_intrusive<Counted>(1);
  Ptr given = a;
  std::thread([p = std::move(given)]() mutable { p.reset(); }).join();
  EXPECT_EQ(a.use_count(), 1u);
  release_queued_references();
  EXPECT_EQ(g_destroyed.load(), 0);
  EXPECT_EQ(a->value, 1);
  Ptr again = a;
  EXPECT_EQ(a.use_count(), 2u);
  again.reset();
  a.reset();
  EXPECT_EQ(g_destroyed.load(), 1);
}

// The creating thread is gone when the last handle is dropped: the dropping
// thread frees the object at once.
TEST_F(RefcountTest, ObjectsOutliveTheThreadThatMadeThem) {
  std::vector<Ptr> kept;
  std::thread([&] {
    for (int i = 0; i < 10; ++i) kept.push_back(make_intrusive<Counted>(i));
    Ptr extra = kept[0];  // dropped by this thread before it exits
  }).join();
  EXPECT_EQ(g_destroyed.load(), 0);
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i]->value, static_cast<int>(i));
  Ptr copy = kept[3];
  kept.clear();
  EXPECT_EQ(g_destroyed.load(), 9);
  copy.reset();
  EXPECT_EQ(g_destroyed.load(), 10);
}

// What was queued to a thread is freed when that thread exits.
TEST_F(RefcountTest, AnExitingOwnerFreesWhatWasQueuedToIt) {
  std::mutex mu;
  std::condition_variable cv;
  Ptr handoff;
  bool dropped = false;
  std::thread owner([&] {
    Ptr a = make_intrusive<Counted>(1);
    {
      std::lock_guard<std::mutex> lock(mu);
      handoff = a;
    }
    cv.notify_all();
    a.reset();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return dropped; });
    EXPECT_EQ(g_destroyed.load(), 0);
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return static_cast<bool>(handoff); });
    handoff.reset();  // the owner's reference: queued to the owner
    dropped = true;
  }
  cv.notify_all();
  owner.join();
  EXPECT_EQ(g_destroyed.load(), 1);
}

// Objects made and dropped by thread_local destructors of an exiting thread.
struct MadeAtExit {
  ~MadeAtExit() {
    Ptr p = make_intrusive<Counted>(7);
    Ptr q = p;
  }
};
thread_local MadeAtExit tls_made_at_exit;

TEST_F(RefcountTest, ObjectsMadeWhileAThreadExitsAreFreed) {
  std::thread([] {
    // Made before this thread registers, so its destructor runs after the thread
    // has unregistered: its objects start shared.
    (void)&tls_made_at_exit;
    Ptr first = make_intrusive<Counted>(1);
  }).join();
  EXPECT_EQ(g_made.load(), 2);
  EXPECT_EQ(g_destroyed.load(), 2);
}

// Note [Biased reference counts]: the bound for an owner that makes objects, hands
// them to another thread and then blocks. Here 1 GiB of storage (256 x 4 MiB, the
// memory behind tensors, each freed through a counting deleter) made on one thread,
// which then waits on a condition variable: detached, as a blocking thread should
// wait, it has no backlog, and the other thread's drops free every byte at once.
std::atomic<size_t> g_freed_bytes{0};
void freeCounted(void* p) {
  g_freed_bytes += 4u << 20;
  std::free(p);
}

TEST_F(RefcountTest, WhatAnIdleDetachedOwnerMadeIsFreedWhenAnotherThreadDropsIt) {
  constexpr size_t kChunk = 4u << 20, kChunks = 256;  // 1 GiB
  g_freed_bytes = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool waiting = false, done = false, attached_again = false;
  std::vector<Storage> handed;
  std::thread maker([&] {
    std::vector<Storage> mine;
    for (size_t i = 0; i < kChunks; ++i) {
      void* p = std::malloc(kChunk);
      ASSERT_NE(p, nullptr);
      std::memset(p, 1, kChunk);  // resident, not only reserved
      mine.push_back(make_intrusive<StorageImpl>(DataPtr{p, p, &freeCounted}, kChunk, Device(DeviceType::CPU)));
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      handed = mine;  // copies the owner makes: counted on its side
    }
    mine.clear();  // its own handles go; the handed copies are the last ones
    {
      DetachedScope idle;
      std::unique_lock<std::mutex> lock(mu);
      waiting = true;
      cv.notify_all();
      cv.wait(lock, [&] { return done; });
    }
    // Attached again: it makes and frees objects as before.
    Ptr p = make_intrusive<Counted>(1);
    Ptr q = p;
    attached_again = p.use_count() == 2;
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return waiting; });
  }
  EXPECT_EQ(g_freed_bytes.load(), 0u);
  {
    std::lock_guard<std::mutex> lock(mu);
    handed.clear();  // the last handles, dropped while the maker waits
  }
  EXPECT_EQ(g_freed_bytes.load(), kChunk * kChunks);  // all of it, now, on this thread
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  maker.join();
  EXPECT_TRUE(attached_again);
  EXPECT_EQ(g_destroyed.load(), 1);
}

// The same owner, attached while it waits: the drops queue to it, and the memory
// comes back only when it next makes an object (the bound the Note gives).
TEST_F(RefcountTest, AnAttachedIdleOwnerFreesWhatOthersDroppedWhenItNextMakesAnObject) {
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;
  Ptr handed;
  std::thread maker([&] {
    Ptr mine = make_intrusive<Counted>(1);
    std::unique_lock<std::mutex> lock(mu);
    handed = mine;
    mine.reset();
    step = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return step == 2; });
    EXPECT_EQ(g_destroyed.load(), 0);  // queued to this thread
    Ptr next = make_intrusive<Counted>(2);  // merges the queue
    EXPECT_EQ(g_destroyed.load(), 1);
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return step == 1; });
    handed.reset();
    step = 2;
  }
  cv.notify_all();
  maker.join();
  EXPECT_EQ(g_destroyed.load(), 2);
}

// Many threads pass handles to each other through a shared pool, copying and
// dropping at random (and, when `detaching`, also detaching now and then to copy,
// drop and make objects). Every object dies exactly once, after its last handle.
void exchangeHandlesAtRandom(bool detaching) {
  g_made = 0;
  g_destroyed = 0;
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  std::mutex mu;
  std::deque<Ptr> pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(detaching ? t + 100 : t);
      std::vector<Ptr> mine;
      for (int i = 0; i < kRounds; ++i) {
        switch (rng() % (detaching ? 5 : 4)) {
          case 0: mine.push_back(make_intrusive<Counted>(i)); break;
          case 1:
            if (!mine.empty()) {
              std::lock_guard<std::mutex> lock(mu);
              pool.push_back(mine.back());  // a copy: both threads hold it
              if (rng() % 2) mine.pop_back();
            }
            break;
          case 2: {
            std::lock_guard<std::mutex> lock(mu);
            if (!pool.empty()) {
              mine.push_back(std::move(pool.front()));
              pool.pop_front();
            }
            break;
          }
          case 4: {
            // Detached, it still copies and drops what it holds (the shared path).
            DetachedScope detached;
            if (!mine.empty()) {
              Ptr copy = mine.front();
              EXPECT_GE(copy->value, 0);
              if (rng() % 2) mine.erase(mine.begin());
            }
            Ptr made_detached = make_intrusive<Counted>(i);
            if (rng() % 2) mine.push_back(std::move(made_detached));
            break;
          }
          default:
            if (!mine.empty()) {
              EXPECT_GE(mine.back()->value, 0);
              mine.erase(mine.begin() + static_cast<long>(rng() % mine.size()));
            }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  pool.clear();
  release_queued_references();
  EXPECT_EQ(g_destroyed.load(), g_made.load());
}

TEST(RefcountConcurrencyTest, HandlesPassedBetweenThreadsAreFreedExactlyOnce) { exchangeHandlesAtRandom(false); }

TEST(RefcountConcurrencyTest, OwnersDetachingAndAttachingWhileOthersDropFreeEachObjectOnce) {
  exchangeHandlesAtRandom(true);
}

// Tensors are such objects: a view made on another thread shares the storage, and
// both die with their last handles.
TEST(RefcountConcurrencyTest, TensorsSharedAcrossThreads) {
  Tensor t = ones({1000});
  std::vector<std::thread> threads;
  std::vector<Tensor> views(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 5000; ++k) {
        Tensor copy = t;
        views[i] = copy.slice(0, i, i + 10);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.getIntrusivePtr().use_count(), 1u);
  t = Tensor();
  for (const Tensor& v : views) EXPECT_EQ(v.numel(), 10);
  views.clear();
}

// --- Small object pools (Note [Small object pools]) and pooled stacks ---------

constexpr bool kPooling = !STRATA_SANITIZED;  // as object_pool.cc decides

// Counted, with its memory from the pools.
struct PooledCounted : Counted {
  STRATA_POOLED_OBJECT
  explicit PooledCounted(int v) : Counted(v) {}
  char payload[40] = {};
};

// Freed blocks come back, newest first, to the thread that freed them: objects are
// whole and distinct however many are alive at once (more than a list keeps).
TEST_F(RefcountTest, PooledObjectsReuseFreedBlocksOnTheFreeingThread) {
  std::vector<intrusive_ptr<PooledCounted>> live;
  for (int i = 0; i < 200; ++i) live.push_back(make_intrusive<PooledCounted>(i));
  const PooledCounted* last = live.back().get();
  for (int i = 0; i < 200; ++i) EXPECT_EQ(live[static_cast<size_t>(i)]->value, i);
  live.pop_back();  // freed: the next object of this size takes its block
  const auto again = make_intrusive<PooledCounted>(7);
  if (kPooling) EXPECT_EQ(again.get(), last);
  EXPECT_EQ(again->value, 7);
  live.clear();
  EXPECT_EQ(g_destroyed.load(), 200);
}

// Made on one thread, freed on others that then exit (their lists go back to
// operator delete), and freed by a thread_local destructor after its thread's pool is
// gone: each object is destroyed once and nothing is lost (run under ASan, which
// also sees the blocks themselves when nothing is pooled).
TEST_F(RefcountTest, PooledObjectsCrossThreadsAndOutliveThem) {
  std::vector<intrusive_ptr<PooledCounted>> made;
  for (int i = 0; i < 300; ++i) made.push_back(make_intrusive<PooledCounted>(i));
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    std::vector<intrusive_ptr<PooledCounted>> mine(made.begin() + t * 100, made.begin() + (t + 1) * 100);
    threads.emplace_back([mine = std::move(mine)]() mutable {
      // Dropped here, then more made and dropped from the blocks just freed.
      mine.clear();
      for (int i = 0; i < 100; ++i) (void)make_intrusive<PooledCounted>(i);
      // A tensor this thread's exit drops after its pool went away.
      thread_local struct Late {
        Tensor t;
        ~Late() { t = Tensor(); }
      } late;
      late.t = ones({3});
    });
  }
  made.clear();  // the main thread's references; the threads hold the rest
  for (auto& th : threads) th.join();
  release_queued_references();
  EXPECT_EQ(g_destroyed.load(), g_made.load());
  EXPECT_EQ(g_made.load(), 600);
}

// A wrapper aligned beyond the default gets aligned memory (not the pool's), and
// placement new still works on pooled classes.
struct alignas(64) AlignedWrapper : TensorWrapper {
  std::string what() const override { return "aligned"; }
  std::string str() const override { return "aligned"; }
  double lanes[8] = {};
};

TEST_F(RefcountTest, OverAlignedWrappersAndPlacementNew) {
  std::vector<intrusive_ptr<AlignedWrapper>> ws;
  for (int i = 0; i < 16; ++i) {
    ws.push_back(make_intrusive<AlignedWrapper>());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ws.back().get()) % 64, 0u);
  }
  ws.clear();
  alignas(PooledCounted) unsigned char buf[sizeof(PooledCounted)];
  auto* placed = new (buf) PooledCounted(5);
  EXPECT_EQ(placed->value, 5);
  placed->~PooledCounted();
}

// Note [Reusing wrapper tensors]: a wrapper held by one handle on the thread that made
// it may be spent and pointed at new metadata; any other is refused, unchanged.
struct NoteWrapper : TensorWrapper {
  std::string what() const override { return "a test wrapper"; }
  std::string str() const override { return "NoteWrapper"; }
};

std::string internalErrorOf(const std::function<void()>& f) { return testing::errorOf(ErrorKind::Internal, f); }

TEST_F(RefcountTest, AWrapperHeldOnceOnItsThreadIsReusedAnyOtherIsRefused) {
  const Tensor data = zeros({4, 6});
  const Tensor t(make_intrusive<TensorImpl>(data.storage(), ScalarType::Float, std::vector<int64_t>{6},
                                            std::vector<int64_t>{1}, 0, DispatchKeySet(DispatchKey::Batched),
                                            make_intrusive<NoteWrapper>()));
  TensorImpl* impl = t.unsafeGetTensorImpl();
  const uint32_t storage_owners = data.storage()->use_count();
  EXPECT_TRUE(impl->unique_here());
  EXPECT_TRUE(impl->reusable_wrapper());
  {
    // A second handle: refused, nothing changed.
    const Tensor copy = t;
    EXPECT_FALSE(impl->unique_here());
    EXPECT_FALSE(impl->reusable_wrapper());
    EXPECT_THAT(internalErrorOf([&] { impl->release_wrapper(); }), ::testing::HasSubstr("release_wrapper"));
    EXPECT_THAT(internalErrorOf([&] {
                  impl->reset_wrapper(data.storage(), ScalarType::Long, std::vector<int64_t>{2, 3},
                                      std::vector<int64_t>{3, 1}, 0);
                }),
                ::testing::HasSubstr("reset_wrapper"));
    EXPECT_EQ(t.sizes()[0], 6);
    EXPECT_EQ(t.dtype(), ScalarType::Float);
    EXPECT_EQ(data.storage()->use_count(), storage_owners);
  }
  // Looked at from another thread, it is not that thread's to reuse.
  bool unique_elsewhere = true;
  std::thread([&] { unique_elsewhere = impl->unique_here(); }).join();
  EXPECT_FALSE(unique_elsewhere);
  // A plain tensor is no wrapper.
  const Tensor plain = zeros({2});
  EXPECT_TRUE(plain.unsafeGetTensorImpl()->unique_here());
  EXPECT_FALSE(plain.unsafeGetTensorImpl()->reusable_wrapper());
  EXPECT_THAT(internalErrorOf([&] { plain.unsafeGetTensorImpl()->release_wrapper(); }),
              ::testing::HasSubstr("release_wrapper"));
  // Spent, it holds no data; reset, it is the wrapper it would have been if made so.
  impl->release_wrapper();
  EXPECT_EQ(data.storage()->use_count(), storage_owners - 1);
  const Tensor other = empty({5, 0, 2}, TensorOptions(ScalarType::Long).with_device(kMeta));
  impl->reset_wrapper(other.storage(), ScalarType::Long, std::vector<int64_t>{5, 2}, std::vector<int64_t>{0, 1}, 3);
  EXPECT_EQ(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(std::vector<int64_t>(t.strides().begin(), t.strides().end()), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(t.numel(), 10);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage_offset(), 3);
  EXPECT_EQ(t.dtype(), ScalarType::Long);
  EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(t.key_set(), DispatchKeySet(DispatchKey::Meta).add(DispatchKey::Batched));
  EXPECT_TRUE(t.is_alias_of(other));
  // Sizes whose count does not fit: Error(Value), as a wrapper made with them gets;
  // nothing changed.
  EXPECT_THAT(testing::errorOf(ErrorKind::Value,
                               [&] {
                                 impl->reset_wrapper(data.storage(), ScalarType::Float,
                                                     std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40},
                                                     std::vector<int64_t>{0, 0}, 0);
                               }),
              ::testing::HasSubstr("sizes [1099511627776, 1099511627776] hold more elements than fit in 64 bits"));
  EXPECT_EQ(t.numel(), 10);
  EXPECT_TRUE(t.is_meta());
  // More dims than fit in place, then fewer again.
  impl->reset_wrapper(data.storage(), ScalarType::Float, std::vector<int64_t>{1, 2, 1, 2, 1, 3, 1},
                      std::vector<int64_t>{12, 6, 6, 3, 3, 1, 1}, 0);
  EXPECT_EQ(t.dim(), 7);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.size(5), 3);
  // Its own sizes and strides, a view of them: read before they are replaced.
  impl->reset_wrapper(data.storage(), ScalarType::Float, t.sizes().subspan(3), t.strides().subspan(3), 0);
  EXPECT_EQ(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), (std::vector<int64_t>{2, 1, 3, 1}));
  EXPECT_EQ(std::vector<int64_t>(t.strides().begin(), t.strides().end()), (std::vector<int64_t>{3, 3, 1, 1}));
  impl->reset_wrapper(data.storage(), ScalarType::Float, t.strides(), t.sizes(), 0);
  EXPECT_EQ(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), (std::vector<int64_t>{3, 3, 1, 1}));
  EXPECT_EQ(std::vector<int64_t>(t.strides().begin(), t.strides().end()), (std::vector<int64_t>{2, 1, 3, 1}));
  EXPECT_THAT(internalErrorOf([&] {
                impl->reset_wrapper(data.storage(), ScalarType::Float, std::vector<int64_t>{2}, std::vector<int64_t>{}, 0);
              }),
              ::testing::HasSubstr("sizes [2] and strides [] differ in length"));
  EXPECT_THAT(internalErrorOf([&] { impl->reset_wrapper(Storage(), ScalarType::Float, {}, {}, 0); }),
              ::testing::HasSubstr("needs a storage"));
  EXPECT_EQ(t.dim(), 4);
  impl->reset_wrapper(data.storage(), ScalarType::Float, std::vector<int64_t>{0, 4}, std::vector<int64_t>{4, 1}, 0);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.is_cpu());
}

// reset_wrapper_hiding_dim is reset_wrapper with the value's metadata less one dim,
// for every dim of values of every kind (views, expanded, zero-sized, meta, more dims
// than kept in place, symbolic sizes), and refuses what reset_wrapper refuses.
TEST_F(RefcountTest, ResetWrapperHidingADimIsResetWrapperWithoutThatDim) {
  const Tensor data = zeros({4, 6});
  auto makeWrapper = [&] {
    return Tensor(make_intrusive<TensorImpl>(data.storage(), ScalarType::Float, std::vector<int64_t>{6},
                                             std::vector<int64_t>{1}, 0, DispatchKeySet(DispatchKey::Batched),
                                             make_intrusive<NoteWrapper>()));
  };
  const Tensor fast = makeWrapper(), general = makeWrapper();
  const Tensor base = zeros({2, 3, 4, 5});
  const Tensor sym_value = empty_strided(std::vector<int64_t>{2, sym::newSymbol("s_hide", 2), 3},
                                         std::vector<int64_t>{1, 1, 1}, TensorOptions().with_device(kMeta));
  const std::vector<Tensor> values = {
      base,
      base.permute({2, 0, 3, 1}),
      base.select(1, 2),
      empty_strided(std::vector<int64_t>{3, 5, 4}, std::vector<int64_t>{4, 0, 1}),  // expanded
      zeros({0, 3}),
      empty_strided(std::vector<int64_t>{0, 3}, std::vector<int64_t>{3, 5}),  // contiguous only while dim 0 counts
      empty_strided(std::vector<int64_t>{0, 3, 2}, std::vector<int64_t>{3, 5, 1}),  // not contiguous without dim 2
      empty_strided(std::vector<int64_t>{3, 0, 2}, std::vector<int64_t>{7, 2, 1}),
      zeros({7}),
      zeros({1, 1, 2}),
      empty({2, 3, 1, 2, 1, 3, 2}, TensorOptions(ScalarType::Long).with_device(kMeta)),
      zeros({2, 3, 1, 2, 1, 3}).transpose(0, 5),
      sym_value,
      empty_strided(std::vector<int64_t>{2, 3}, std::vector<int64_t>{sym::newSymbol("s_stride", 3), 1},
                    TensorOptions().with_device(kMeta)),  // concrete sizes, a symbolic stride
      base.slice(3, 1, 4),
  };
  for (const Tensor& v : values) {
    for (int64_t h = 0; h < v.dim(); ++h) {
      SCOPED_TRACE("value " + sym::shapeStr(v.sizes()) + " strides " + sym::shapeStr(v.strides()) +
                   ", hiding dim " + std::to_string(h));
      std::vector<int64_t> sizes, strides;
      for (int64_t d = 0; d < v.dim(); ++d) {
        if (d == h) continue;
        sizes.push_back(v.sizes()[static_cast<size_t>(d)]);
        strides.push_back(v.strides()[static_cast<size_t>(d)]);
      }
      general.unsafeGetTensorImpl()->reset_wrapper(v.storage(), v.dtype(), sizes, strides, v.storage_offset());
      // Spent first, as vmap's are (no storage), every other time.
      if (h % 2 == 1) fast.unsafeGetTensorImpl()->release_wrapper();
      fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(v, h);
      EXPECT_EQ(std::vector<int64_t>(fast.sizes().begin(), fast.sizes().end()), sizes);
      EXPECT_EQ(std::vector<int64_t>(fast.strides().begin(), fast.strides().end()), strides);
      EXPECT_EQ(fast.numel(), general.numel());
      EXPECT_EQ(fast.is_contiguous(), general.is_contiguous());
      EXPECT_EQ(fast.storage_offset(), v.storage_offset());
      EXPECT_EQ(fast.dtype(), v.dtype());
      EXPECT_EQ(fast.key_set(), general.key_set());
      EXPECT_TRUE(fast.is_alias_of(v));
    }
  }
  // Hiding dim 0 of [0, 2^40, 2^40] leaves a count that does not fit: Error(Value), as
  // reset_wrapper gives; nothing changed.
  fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(base, 1);
  const Tensor huge =
      empty_strided(std::vector<int64_t>{0, int64_t{1} << 40, int64_t{1} << 40}, std::vector<int64_t>{0, 0, 0});
  EXPECT_THAT(testing::errorOf(ErrorKind::Value,
                               [&] { fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(huge, 0); }),
              ::testing::HasSubstr("hold more elements than fit in 64 bits"));
  EXPECT_EQ(std::vector<int64_t>(fast.sizes().begin(), fast.sizes().end()), (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(std::vector<int64_t>(fast.strides().begin(), fast.strides().end()), (std::vector<int64_t>{60, 5, 1}));
  EXPECT_EQ(fast.numel(), 40);
  EXPECT_FALSE(fast.is_contiguous());
  EXPECT_EQ(fast.key_set(), DispatchKeySet(DispatchKey::CPU).add(DispatchKey::Batched));
  EXPECT_TRUE(fast.is_alias_of(base));
  EXPECT_THAT(testing::errorOf(ErrorKind::Index, [&] { fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(base, 4); }),
              ::testing::HasSubstr("dim 4 is out of range for a tensor of dimensionality 4"));
  EXPECT_THAT(testing::errorOf(ErrorKind::Index, [&] { fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(base, -1); }),
              ::testing::HasSubstr("dim -1 is out of range"));
  EXPECT_THAT(internalErrorOf([&] { fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(Tensor(), 0); }),
              ::testing::HasSubstr("must be a defined tensor other than the wrapper"));
  EXPECT_THAT(internalErrorOf([&] { fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(fast, 0); }),
              ::testing::HasSubstr("must be a defined tensor other than the wrapper"));
  general.unsafeGetTensorImpl()->release_wrapper();
  EXPECT_THAT(internalErrorOf([&] { fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(general, 0); }),
              ::testing::HasSubstr("the value has no storage (a spent wrapper holds none)"));
  {
    const Tensor copy = fast;  // held twice: refused
    EXPECT_THAT(internalErrorOf([&] { fast.unsafeGetTensorImpl()->reset_wrapper_hiding_dim(base, 0); }),
                ::testing::HasSubstr("reset_wrapper_hiding_dim"));
  }
  EXPECT_EQ(fast.dim(), 3);
  EXPECT_EQ(fast.numel(), 40);
}

// A typed call that reaches a boxed kernel boxes into a Stack in its own frame (Note
// [Stacks in place]): nested calls each get their own, and a kernel that swaps in a
// Stack of its own (larger than the values kept in place) gives correct results.
TEST(BoxedCallStackTest, NestedBoxedCallsAndSwappedStacks) {
  using Sig = int64_t(int64_t);
  static const TypedOperatorHandle<Sig>* down = nullptr;
  Library lib(Library::DEF, "boxed_stack_test");
  lib.def("down(int n) -> int");
  lib.def("swap(int n) -> int");
  lib.impl("down", CppFunction::makeFromBoxedFunctor([](const OperatorHandle&, Stack& stack) {
             const int64_t n = stack.back().toInt();
             stack.back() = IValue(n <= 0 ? int64_t{0} : 1 + down->call(n - 1));  // a typed call inside a boxed kernel
           }), DispatchKey::CompositeExplicitAutograd);
  lib.impl("swap", CppFunction::makeFromBoxedFunctor([](const OperatorHandle&, Stack& stack) {
             Stack big;
             big.reserve(1000);
             big.push_back(IValue(stack.back().toInt() * 2));
             stack.swap(big);
           }), DispatchKey::CompositeExplicitAutograd);
  static const auto d = Dispatcher::singleton().findSchemaOrThrow("boxed_stack_test::down", "").typed<Sig>();
  down = &d;
  const auto sw = Dispatcher::singleton().findSchemaOrThrow("boxed_stack_test::swap", "").typed<Sig>();
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(d.call(30), 30);  // 31 stacks alive at the deepest point
    EXPECT_EQ(sw.call(21), 42);
  }
}

}  // namespace
}  // namespace strata
