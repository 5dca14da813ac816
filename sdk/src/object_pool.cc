// Per-thread free lists for the small objects every op makes and drops: a tensor's
// TensorImpl and StorageImpl, a wrapper tensor's TensorWrapper (Note [Small object
// pools] in strata/intrusive_ptr.h). Stacks need none: they hold their values in
// place (Note [Stacks in place] in strata/ivalue.h).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "sanitized.h"
#include "strata/intrusive_ptr.h"

#define STRATA_POOL_OBJECTS (!STRATA_SANITIZED)

namespace strata::detail {

#if STRATA_POOL_OBJECTS

namespace {

constexpr size_t kGrain = 8;          // sizes are multiples of 8 (every pooled class's is)
constexpr size_t kMaxBytes = 512;     // larger objects go straight to operator new
constexpr size_t kClasses = kMaxBytes / kGrain + 1;
constexpr uint32_t kMaxPerClass = 64;  // blocks kept per size, per thread

struct FreeBlock {
  FreeBlock* next;
};

struct Pool {
  FreeBlock* head[kClasses] = {};
  uint32_t count[kClasses] = {};
  ~Pool() {
    for (size_t c = 0; c < kClasses; ++c) {
      while (FreeBlock* b = head[c]) {
        head[c] = b->next;
        ::operator delete(static_cast<void*>(b));
      }
    }
  }
};

// This thread's pool, made on first use. The pointer is initial-exec TLS (one
// %fs-relative load); the owner frees the blocks when the thread exits and clears the
// pointer first, so objects dropped later in the thread's exit go to operator delete.
__thread Pool* t_pool __attribute__((tls_model("initial-exec"))) = nullptr;
__thread bool t_pool_gone __attribute__((tls_model("initial-exec"))) = false;

struct PoolOwner {
  std::unique_ptr<Pool> pool;
  ~PoolOwner() {
    t_pool = nullptr;
    t_pool_gone = true;
  }
};

Pool* makePool() noexcept {
  if (t_pool_gone) return nullptr;
  thread_local PoolOwner owner;
  owner.pool.reset(new (std::nothrow) Pool());  // none (out of memory): nothing is pooled
  t_pool = owner.pool.get();
  return t_pool;
}

// Exact sizes only: a block in list c was allocated with exactly c * kGrain bytes (a
// block operator new made for another size must never serve this one).
inline bool pooled(size_t bytes) { return bytes % kGrain == 0 && bytes <= kMaxBytes && bytes != 0; }

}  // namespace

void* pool_allocate(size_t bytes) {
  if (__builtin_expect(pooled(bytes), 1)) {
    Pool* pool = t_pool;
    if (__builtin_expect(pool == nullptr, 0)) pool = makePool();
    if (pool != nullptr) {
      const size_t c = bytes / kGrain;
      if (FreeBlock* b = pool->head[c]) {
        pool->head[c] = b->next;
        --pool->count[c];
        return b;
      }
    }
  }
  return ::operator new(bytes);
}

void pool_free(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (__builtin_expect(pooled(bytes), 1)) {
    Pool* pool = t_pool;
    const size_t c = bytes / kGrain;
    if (pool != nullptr && pool->count[c] < kMaxPerClass) {
      auto* b = static_cast<FreeBlock*>(p);
      b->next = pool->head[c];
      pool->head[c] = b;
      ++pool->count[c];
      return;
    }
  }
  ::operator delete(p);
}

#else  // sanitizers: every object its own allocation, so use-after-free is caught

void* pool_allocate(size_t bytes) { return ::operator new(bytes); }
void pool_free(void* p, size_t) noexcept { ::operator delete(p); }

#endif

}  // namespace strata::detail
