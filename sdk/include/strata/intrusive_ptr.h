// An intrusively ref-counted owning pointer, like c10::intrusive_ptr, with biased
// reference counts (Note [Biased reference counts]).
//
// The count lives in the object (intrusive_ptr_target), so a raw T* can be turned
// back into an owner without a control block, and a handle is one pointer wide.
// Thread safety: copying, moving and destroying handles to the same object from
// several threads is safe; the object itself is not made thread safe by this.
//
// Note [Biased reference counts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Most handles are copied and dropped on the thread that made the object (a kernel
// returns a tensor, a stack holds its arguments), and an atomic read-modify-write
// per copy is most of what a dispatched call costs (~5.7 ns each on the 2-vCPU VM,
// where the whole dispatch is ~2 ns). So each object is *biased* toward the thread
// that created it, as in CPython's free-threaded build (PEP 703) after Choi et al.,
// "Biased Reference Counting" (PACT 2018):
//   - owner_ is the creating thread's token (tokens are never reused; a thread gets
//     one when it first creates an object). local_ counts the owner's references
//     and only the owner touches it, with plain loads and stores. shared_ counts
//     every other thread's references (shifted left by 2; it may go negative when
//     another thread drops a reference the owner made), with atomic operations;
//     its low two bits are flags: kQueued, kMerged.
//   - When the owner's local_ drops to 0 it *merges*: if shared_ is 0 the object is
//     freed; otherwise the owner gives up ownership (owner_ = kNoOwner), sets
//     kMerged, and from then on every thread uses shared_ alone.
//   - When another thread would take shared_ below zero from exactly 0, it cannot
//     tell whether the owner still holds references, so it does not decrement: it
//     sets kQueued and hands the object (with that reference) to the owner's queue.
//     The owner merges queued objects (local_ + shared_ - 1, freeing at 0) when it
//     next creates an object, and when it exits. If the owner has exited already,
//     the queuing thread merges at once: nobody can touch local_ any more.
// The one cost of the scheme: an object dropped by other threads waits in its
// owner's queue. The bound on that wait:
//   - an attached owner (the default) merges its queue when it next creates an
//     object, when it calls strata::release_queued_references(), when it detaches,
//     and when it exits;
//   - a *detached* owner (inside a DetachedScope, or between detach_thread() and
//     attach_thread(): a thread about to block, as PEP 703's detached thread states)
//     has no queue: a drop that would queue to it merges at once on the dropping
//     thread, so what others drop is freed when the last handle goes. While
//     detached, the thread's token is set aside, so any handle it still touches
//     takes the shared (atomic) path and never races the mergers on local_.
// So memory dropped elsewhere is held only while its owner is attached and runs
// without creating objects; a thread that blocks for long (an event loop's wait, a
// condition variable) should wait detached. A serving host instead releases its
// queue at each poll of the store (every 50 ms).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

#include "strata/export.h"

namespace strata {

class intrusive_ptr_target;

// Note [Small object pools]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Every op makes and drops a TensorImpl and a StorageImpl, a vmap call three batched
// tensors of two objects each; glibc keeps only 7 freed blocks per size per thread,
// so most of those went through malloc's slow paths (a vmap call with a rule ran
// ~130 ns faster under tcmalloc). These classes take their memory from per-thread
// free lists instead (pool_allocate / pool_free, as their operator new / delete):
//   - a list per exact object size (multiples of 8 up to 512 bytes), at most 64
//     blocks each per thread; a block always has exactly its list's size, so one
//     that operator new made elsewhere (an older bundle's `new StorageImpl`) fits;
//   - an object freed on another thread joins that thread's list; a thread's lists
//     go back to operator delete when it exits, and objects freed after that (by
//     later thread_local destructors) go straight there;
//   - under ASan, TSan and MSan nothing is pooled, so use-after-free is still caught.
namespace detail {
STRATA_API void* pool_allocate(size_t bytes);
STRATA_API void pool_free(void* p, size_t bytes) noexcept;
}  // namespace detail

// operator new / delete from the pools (Note [Small object pools]), for a class. A
// subclass aligned beyond the default (alignas(32)) goes to the global aligned forms,
// and placement new stays available (a class-scope operator new hides the global ones).
#define STRATA_POOLED_OBJECT                                                                             \
  static void* operator new(size_t bytes) { return ::strata::detail::pool_allocate(bytes); }             \
  static void operator delete(void* p, size_t bytes) noexcept { ::strata::detail::pool_free(p, bytes); } \
  static void* operator new(size_t bytes, std::align_val_t al) { return ::operator new(bytes, al); }     \
  static void operator delete(void* p, size_t, std::align_val_t al) noexcept { ::operator delete(p, al); } \
  static void* operator new(size_t, void* where) noexcept { return where; }                              \
  static void operator delete(void*, void*) noexcept {}

namespace detail::refcount {
// This thread's owner token; 0 until it first creates an object (so it matches no
// object: an object's owner_ is a token >= 1 or kNoOwner). Initial-exec TLS: one
// %fs-relative load from any library.
extern STRATA_API __thread uint64_t tls_owner_token __attribute__((tls_model("initial-exec")));
inline constexpr uint64_t kNoOwner = ~uint64_t{0};
inline constexpr int64_t kShift = 2;
inline constexpr int64_t kOne = int64_t{1} << kShift;
inline constexpr int64_t kQueued = 1;
inline constexpr int64_t kMerged = 2;
inline constexpr int64_t kFlags = 3;

// The token of this thread for a new object (registers the thread the first time,
// and merges the objects other threads queued to it).
STRATA_API uint64_t ownerForNewObject() noexcept;
// The slow paths: a non-owner's decrement, and the owner's last local reference.
STRATA_API void decrefShared(const intrusive_ptr_target* p) noexcept;
STRATA_API void mergeZeroLocal(const intrusive_ptr_target* p) noexcept;
}  // namespace detail::refcount

// Frees now what other threads dropped of the objects this thread created (see
// Note [Biased reference counts]); a thread that hands tensors to others and then
// creates none for a long time may call it. Returns how many objects were merged.
STRATA_API size_t release_queued_references() noexcept;

// Detaches this thread (see Note [Biased reference counts]): until attach_thread(),
// what other threads drop of the objects it made is freed at once, on their side.
// Nests (each detach_thread needs its attach_thread). For a thread about to block.
STRATA_API void detach_thread() noexcept;
STRATA_API void attach_thread() noexcept;
class DetachedScope {
 public:
  DetachedScope() noexcept { detach_thread(); }
  DetachedScope(const DetachedScope&) = delete;
  DetachedScope& operator=(const DetachedScope&) = delete;
  ~DetachedScope() { attach_thread(); }
};

class intrusive_ptr_target {
 public:
  // The number of owners. Exact when no other thread is copying or dropping handles
  // to the object at the same time.
  uint32_t use_count() const noexcept {
    using namespace detail::refcount;
    const int64_t shared = shared_.load(std::memory_order_acquire);
    // While queued (and not merged), one of local_'s references is the queue's: the
    // one another thread dropped.
    const int64_t queued = (shared & kFlags) == kQueued ? 1 : 0;
    return static_cast<uint32_t>((shared >> kShift) + local_.load(std::memory_order_relaxed) - queued);
  }
  // Whether the one owner is a handle on this thread, which made the object: no other
  // thread holds it, nor can reach it but through that handle (so the holder may
  // reuse it, Note [Reusing wrapper tensors] in strata/tensor.h). Exact.
  bool unique_here() const noexcept {
    return ownedHere() && local_.load(std::memory_order_relaxed) == 1 &&
           shared_.load(std::memory_order_acquire) == 0;
  }

 protected:
  intrusive_ptr_target() noexcept : owner_(detail::refcount::ownerForNewObject()) {}
  // Copying an object does not copy its owners.
  intrusive_ptr_target(const intrusive_ptr_target&) noexcept : intrusive_ptr_target() {}
  intrusive_ptr_target& operator=(const intrusive_ptr_target&) noexcept { return *this; }
  virtual ~intrusive_ptr_target() = default;

 private:
  template <typename T>
  friend class intrusive_ptr;
  friend void intrusive_incref(const intrusive_ptr_target* p) noexcept;
  friend void intrusive_decref(const intrusive_ptr_target* p) noexcept;
  friend void detail::refcount::decrefShared(const intrusive_ptr_target* p) noexcept;
  friend void detail::refcount::mergeZeroLocal(const intrusive_ptr_target* p) noexcept;
  friend struct RefcountAccess;

  bool ownedHere() const noexcept {
    return owner_.load(std::memory_order_relaxed) == detail::refcount::tls_owner_token;
  }

  // See Note [Biased reference counts]. Invariant: the number of owners is
  // local_ + (shared_ >> kShift), plus one per queued reference until it merges.
  mutable std::atomic<uint64_t> owner_;
  mutable std::atomic<uint32_t> local_{0};  // the owner thread's alone (relaxed loads and stores)
  // An object made with no owner (by a thread that is exiting) is merged from the start.
  mutable std::atomic<int64_t> shared_{owner_.load(std::memory_order_relaxed) == detail::refcount::kNoOwner
                                           ? detail::refcount::kMerged
                                           : 0};
};

inline void intrusive_incref(const intrusive_ptr_target* p) noexcept {
  if (__builtin_expect(p->ownedHere(), 1)) {
    p->local_.store(p->local_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return;
  }
  p->shared_.fetch_add(detail::refcount::kOne, std::memory_order_relaxed);
}
// Deletes the object when the last owner goes.
inline void intrusive_decref(const intrusive_ptr_target* p) noexcept {
  if (__builtin_expect(p->ownedHere(), 1)) {
    const uint32_t n = p->local_.load(std::memory_order_relaxed) - 1;
    p->local_.store(n, std::memory_order_relaxed);
    if (__builtin_expect(n == 0, 0)) detail::refcount::mergeZeroLocal(p);
    return;
  }
  detail::refcount::decrefShared(p);
}

template <typename T>
class intrusive_ptr {
  static_assert(std::is_base_of_v<intrusive_ptr_target, T>,
                "intrusive_ptr<T> needs T to derive from intrusive_ptr_target");

 public:
  constexpr intrusive_ptr() noexcept = default;
  constexpr intrusive_ptr(std::nullptr_t) noexcept {}  // NOLINT

  // Takes a new reference to p (which may already have owners).
  explicit intrusive_ptr(T* p) noexcept : p_(p) {
    if (p_) intrusive_incref(p_);
  }
  // Adopts a reference the caller already holds (the inverse of release()).
  static intrusive_ptr reclaim(T* p) noexcept {
    intrusive_ptr r;
    r.p_ = p;
    return r;
  }
  template <typename... Args>
  static intrusive_ptr make(Args&&... args) {
    return intrusive_ptr(new T(std::forward<Args>(args)...));
  }

  intrusive_ptr(const intrusive_ptr& o) noexcept : p_(o.p_) {
    if (p_) intrusive_incref(p_);
  }
  intrusive_ptr(intrusive_ptr&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
  intrusive_ptr(const intrusive_ptr<U>& o) noexcept : intrusive_ptr(static_cast<T*>(o.get())) {}  // NOLINT

  intrusive_ptr& operator=(const intrusive_ptr& o) noexcept {
    intrusive_ptr(o).swap(*this);
    return *this;
  }
  intrusive_ptr& operator=(intrusive_ptr&& o) noexcept {
    intrusive_ptr(std::move(o)).swap(*this);
    return *this;
  }
  ~intrusive_ptr() {
    if (p_) intrusive_decref(p_);
  }

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  uint32_t use_count() const noexcept { return p_ ? p_->use_count() : 0; }

  // Gives up ownership without decrementing; pair with reclaim().
  T* release() noexcept { return std::exchange(p_, nullptr); }
  void reset() noexcept { intrusive_ptr().swap(*this); }
  void swap(intrusive_ptr& o) noexcept { std::swap(p_, o.p_); }

  friend bool operator==(const intrusive_ptr& a, const intrusive_ptr& b) { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

template <typename T, typename... Args>
intrusive_ptr<T> make_intrusive(Args&&... args) {
  return intrusive_ptr<T>::make(std::forward<Args>(args)...);
}

}  // namespace strata
