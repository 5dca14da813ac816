// The slow paths of biased reference counting: merging, the per-thread queues of
// objects other threads dropped, and thread exit. See Note [Biased reference
// counts] in strata/intrusive_ptr.h.
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "strata/intrusive_ptr.h"

namespace strata {

namespace detail::refcount {
__thread uint64_t tls_owner_token __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace detail::refcount

// The fields of an object, for the merges below.
struct RefcountAccess {
  static std::atomic<uint64_t>& owner(const intrusive_ptr_target* p) { return p->owner_; }
  static std::atomic<uint32_t>& local(const intrusive_ptr_target* p) { return p->local_; }
  static std::atomic<int64_t>& shared(const intrusive_ptr_target* p) { return p->shared_; }
  static void destroy(const intrusive_ptr_target* p) { delete p; }
};

namespace {

using namespace detail::refcount;
using A = RefcountAccess;

// A registered thread: the objects other threads queued to it.
// state: kAttached (only the owner merges its queue), kDetached (a dropping thread
// may merge it: it claims kMerging first, so the owner cannot re-attach meanwhile).
enum : int { kAttached = 0, kDetached = 1, kMerging = 2 };
struct OwnerThread {
  std::vector<const intrusive_ptr_target*> queue;  // guarded by Registry::mu
  std::atomic<bool> pending{false};                // queue is non-empty (read without the lock)
  std::atomic<int> state{kAttached};
};

struct Registry {
  std::mutex mu;
  std::unordered_map<uint64_t, OwnerThread*> threads;  // live owners, by token; guarded by mu
  uint64_t next_token = 1;                              // guarded by mu
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: threads exit after static destruction
  return *r;
}

// Folds local_ and shared_ into shared_ (marked merged) and gives up ownership;
// returns the number of owners left. Only the owner may call it, or anyone once the
// owner has exited (under Registry::mu, which the exiting owner took last).
int64_t explicitMerge(const intrusive_ptr_target* p, int64_t extra) {
  const int64_t local = A::local(p).load(std::memory_order_relaxed);
  A::local(p).store(0, std::memory_order_relaxed);
  A::owner(p).store(kNoOwner, std::memory_order_relaxed);
  int64_t shared = A::shared(p).load(std::memory_order_relaxed);
  int64_t count = 0;
  do {
    count = (shared >> kShift) + local + extra;
  } while (!A::shared(p).compare_exchange_weak(shared, (count << kShift) | kMerged, std::memory_order_acq_rel,
                                               std::memory_order_relaxed));
  return count;
}

// Merges queued objects, moving those with no owner left to `dead` (not destroyed:
// the caller decides when destructors may run).
void foldQueued(std::vector<const intrusive_ptr_target*>& objects, std::vector<const intrusive_ptr_target*>& dead) {
  for (const intrusive_ptr_target* p : objects) {
    if (explicitMerge(p, -1) == 0) dead.push_back(p);  // -1: the queue's reference
  }
  objects.clear();
}

void mergeAll(std::vector<const intrusive_ptr_target*>& objects) {
  std::vector<const intrusive_ptr_target*> dead;
  foldQueued(objects, dead);
  for (const intrusive_ptr_target* p : dead) A::destroy(p);
}

// This thread's record once registered; whether it has exited (its ThreadExit ran).
// Initial-exec, as tls_owner_token: ownerForNewObject reads it for every object made
// (a __tls_get_addr call each, otherwise).
__thread OwnerThread* tls_self __attribute__((tls_model("initial-exec"))) = nullptr;
__thread bool tls_exited = false;
// While detached: how deep (detach_thread nests), and the token set aside.
__thread int tls_detached = 0;
__thread uint64_t tls_saved_token = 0;

// Unregisters the thread when it exits and merges what was queued to it. Objects
// this thread creates or drops afterwards (other thread_local destructors) use the
// shared count alone.
struct ThreadExit {
  ~ThreadExit() {
    if (tls_detached > 0) {  // detach_thread() without its attach_thread(): take the token back
      tls_detached = 1;
      attach_thread();
    }
    tls_exited = true;
    OwnerThread* self = tls_self;
    if (self == nullptr) return;
    std::vector<const intrusive_ptr_target*> queued;
    {
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mu);
      r.threads.erase(tls_owner_token);
      tls_owner_token = 0;  // from here on this thread owns nothing: ownerForNewObject sees tls_exited
      queued.swap(self->queue);
    }
    tls_self = nullptr;
    mergeAll(queued);  // objects freed here may run code that makes objects: they start shared
    delete self;
  }
};
thread_local ThreadExit tls_exit;

size_t mergeQueued() {
  OwnerThread* self = tls_self;
  if (self == nullptr || !self->pending.load(std::memory_order_acquire)) return 0;
  std::vector<const intrusive_ptr_target*> queued;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    queued.swap(self->queue);
    self->pending.store(false, std::memory_order_relaxed);
  }
  const size_t n = queued.size();
  mergeAll(queued);
  return n;
}

// Hands p (and the reference the caller is dropping) to its owner's queue, or
// merges it here when the owner has exited.
void queueToOwner(const intrusive_ptr_target* p) {
  const uint64_t owner = A::owner(p).load(std::memory_order_acquire);
  if (owner == kNoOwner) {
    // The owner is merging right now: drop the reference again once it has.
    intrusive_decref(p);
    return;
  }
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mu);
  auto it = r.threads.find(owner);
  if (it == r.threads.end()) {
    const int64_t left = explicitMerge(p, -1);
    lock.unlock();
    if (left == 0) A::destroy(p);
    return;
  }
  OwnerThread* owner_thread = it->second;
  int detached = kDetached;
  if (owner_thread->state.compare_exchange_strong(detached, kMerging, std::memory_order_acq_rel)) {
    // The owner is detached and cannot re-attach until kDetached is back: merge what
    // was queued to it and this object here (Note [Biased reference counts]).
    std::vector<const intrusive_ptr_target*> queued;
    queued.swap(owner_thread->queue);
    owner_thread->pending.store(false, std::memory_order_relaxed);
    lock.unlock();
    queued.push_back(p);
    // Only the counts are folded under the claim; the objects that reach zero are
    // destroyed after it is given back, so an owner re-attaching (or exiting) never
    // waits on their destructors, which may take locks it holds.
    std::vector<const intrusive_ptr_target*> dead;
    for (;;) {
      foldQueued(queued, dead);
      // Drops that found kMerging queued meanwhile (under the lock): take them too,
      // or hand the owner back as detached, under the lock, so none is left behind.
      lock.lock();
      if (owner_thread->queue.empty()) {
        owner_thread->state.store(kDetached, std::memory_order_release);
        break;
      }
      queued.swap(owner_thread->queue);
      owner_thread->pending.store(false, std::memory_order_relaxed);
      lock.unlock();
    }
    lock.unlock();
    for (const intrusive_ptr_target* q : dead) A::destroy(q);
    return;
  }
  owner_thread->queue.push_back(p);
  owner_thread->pending.store(true, std::memory_order_release);
}

}  // namespace

namespace detail::refcount {

uint64_t ownerForNewObject() noexcept {
  if (__builtin_expect(tls_owner_token != 0, 1)) {
    if (__builtin_expect(tls_self->pending.load(std::memory_order_relaxed), 0)) mergeQueued();
    return tls_owner_token;
  }
  // Made while this thread exits, or while it is detached: shared (and merged) from the start.
  if (tls_exited || tls_detached > 0) return kNoOwner;
  auto* self = new OwnerThread();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  tls_owner_token = r.next_token++;
  r.threads.emplace(tls_owner_token, self);
  tls_self = self;
  (void)&tls_exit;  // constructs it, so its destructor runs when the thread exits
  return tls_owner_token;
}

void decrefShared(const intrusive_ptr_target* p) noexcept {
  int64_t shared = A::shared(p).load(std::memory_order_relaxed);
  int64_t next = 0;
  bool queue = false;
  do {
    // Zero and neither queued nor merged: the owner may still hold references, so
    // the owner decides (see the Note); the queue holds this reference meanwhile.
    queue = shared == 0;
    next = queue ? kQueued : shared - kOne;
  } while (!A::shared(p).compare_exchange_weak(shared, next, std::memory_order_acq_rel, std::memory_order_relaxed));
  if (queue) {
    queueToOwner(p);
  } else if (next == kMerged) {
    A::destroy(p);
  }
}

void mergeZeroLocal(const intrusive_ptr_target* p) noexcept {
  int64_t shared = A::shared(p).load(std::memory_order_acquire);
  if (shared == 0) {  // no other thread ever kept a reference
    A::destroy(p);
    return;
  }
  A::owner(p).store(kNoOwner, std::memory_order_relaxed);
  int64_t next = 0;
  do {
    next = (shared & ~kFlags) | kMerged;
  } while (!A::shared(p).compare_exchange_weak(shared, next, std::memory_order_acq_rel, std::memory_order_acquire));
  if (next == kMerged) A::destroy(p);
}

}  // namespace detail::refcount

size_t release_queued_references() noexcept { return tls_detached > 0 ? 0 : mergeQueued(); }

void detach_thread() noexcept {
  if (tls_detached++ > 0 || tls_self == nullptr) return;  // nested, or owns nothing
  tls_saved_token = std::exchange(tls_owner_token, 0);  // handles touched now take the shared path
  std::vector<const intrusive_ptr_target*> queued;
  {
    // Under the lock a drop either queued before (taken here) or sees kDetached.
    std::lock_guard<std::mutex> lock(registry().mu);
    queued.swap(tls_self->queue);
    tls_self->pending.store(false, std::memory_order_relaxed);
    tls_self->state.store(kDetached, std::memory_order_release);
  }
  // Still ours to merge: a dropping thread cannot claim them, they left the queue.
  // (The token is set aside, but local_ is only touched here and by no one else.)
  mergeAll(queued);
}

void attach_thread() noexcept {
  if (tls_detached == 0 || --tls_detached > 0 || tls_self == nullptr) return;
  int detached = kDetached;
  // A dropping thread may be folding our objects' counts: wait until it is done (a
  // short loop that runs no destructor and takes no lock we could hold).
  while (!tls_self->state.compare_exchange_weak(detached, kAttached, std::memory_order_acq_rel)) {
    detached = kDetached;
    std::this_thread::yield();
  }
  tls_owner_token = std::exchange(tls_saved_token, 0);
  mergeQueued();  // anything queued in between
}

}  // namespace strata
