#include "grace_period.h"

#include <linux/membarrier.h>
#include <limits.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <mutex>
#include <new>

#include "strata/call_section.h"

// Note [Grace periods]
// ~~~~~~~~~~~~~~~~~~~~
// Calls read a dispatch table slot with no lock and no reference count (Note
// [Publishing dispatch table slots]), so a kernel whose registration goes away may
// still be running, or about to run, on another thread. The dispatcher therefore
// retires it instead of freeing it, and frees it after a grace period: once every
// thread that could have read the old slot has been seen outside all calls. This is
// userspace RCU's "memb" flavour (Desnoyers et al., 2012):
//
// - Readers. Every dispatched call (typed, boxed, redispatch) runs inside a
//   CallSection (strata/call_section.h): the thread's word tls_call_word holds how
//   many sections it is inside and a generation that each outermost call advances
//   as it starts. Entering is a plain store ordered before the slot read by the
//   compiler only; leaving is a plain store. No fence, no atomic
//   read-modify-write, no shared cache line: each thread writes its own word.
//   The boxed entry points (callBoxed, redispatchBoxed: what a mode's or a boxed
//   fallback's handler calls from inside a call) enter only when the thread is at
//   depth 0: a nested section would protect nothing the outer one does not. That
//   relies on sections and CallScopes nesting as scopes do (a CallScope is not
//   copyable or movable; one held on the heap must also end after the calls made
//   while it was held).
// - Registry. A thread's first call links a node in its own TLS into a list (a slow
//   path taken once per thread, allocating nothing); a pthread key's destructor
//   unlinks it at thread exit. Key destructors run after C++ thread_local
//   destructors, and again when one of them calls again, so a call from any
//   thread_local destructor is seen too.
// - Reclaimer. The dispatcher hands everything unpublished so far to a grace period
//   (GracePeriod::begin): heavyBarrier() makes every CPU running a thread of this
//   process execute a full barrier, so a thread whose entry store was still in its
//   store buffer has it visible by then; then each registered thread's word is
//   read. A thread at depth 0 holds nothing old: its next section starts after the
//   barrier and reads the new slots. A thread inside a section may hold an old
//   kernel: the grace period waits until its word shows depth 0 or a new
//   generation (an acquire load pairing with the release stores of the section's
//   exit and of the next entry), so a thread that makes long calls back to back
//   is released by its next call. A thread that registers after the snapshot reads
//   the slots after it (both take the registry's mutex).
// - Nothing blocks. The dispatcher tries to end grace periods after each removal
//   and when Dispatcher::reclaimRetiredKernels() is called (the serving host calls
//   it at each poll); a grace period that is still waiting is checked again then.
//
// The barrier is membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) (Linux 4.14), else
// MEMBARRIER_CMD_GLOBAL, else on x86 an mprotect() whose TLB shootdown interrupts
// every CPU running this process, as folly's asymmetricHeavyBarrier does. With
// none of them (another CPU, a sandbox without membarrier) grace periods never end
// and retired kernels are kept, as a process with no reclamation would.
//
// fork(): the child keeps only the forking thread in the registry; the dispatcher's
// atfork handlers hold its reclaim lock, its mutex and the registry's across fork()
// (in that order, the order the reclaimer takes them), so the child finds them free.
// No user code runs under these locks (records are made before the mutex is taken
// and freed after it is released). An atfork handler registered before Strata's
// runs its prepare after ours: it must not make a thread's first dispatcher call.
//
// The bound: a retired kernel is freed at the first attempt after every thread that
// was inside a call when its grace period started has left that call. A thread that
// stays inside one call for ever (a kernel that never returns) holds back what was
// retired after it entered, and nothing else. Retiring during an open registration
// batch starts no grace period until the batch publishes (Note [Registration
// batches]): until then the old kernel is still in the table.

namespace strata::detail {

__thread uint64_t tls_call_word __attribute__((tls_model("initial-exec"))) = 0;

namespace {

constexpr uint64_t kFreshWord = kCallGeneration;  // depth 0, generation 1

struct Node {
  uint64_t id;  // 0: not linked
  Node* prev;
  Node* next;
  uint64_t* word;
};
__thread Node tls_node __attribute__((tls_model("initial-exec"))) = {0, nullptr, nullptr, nullptr};
// How many times this thread's key destructor ran: glibc runs key destructors again
// while some key is set again, at most PTHREAD_DESTRUCTOR_ITERATIONS rounds.
__thread int tls_exit_rounds __attribute__((tls_model("initial-exec"))) = 0;

void onThreadExit(void* node);

struct Registry {
  std::mutex mu;
  Node head{0, &head, &head, nullptr};  // the list's sentinel
  uint64_t next_id = 1;
  size_t count = 0;
  pthread_key_t key{};
  Registry() {
    if (pthread_key_create(&key, onThreadExit) != 0) {
      std::fputs("strata: cannot create the thread-exit key grace periods need (PTHREAD_KEYS_MAX reached)\n", stderr);
      std::abort();
    }
  }
  void unlink(Node& n) {
    n.prev->next = n.next;
    n.next->prev = n.prev;
    n.id = 0;
    --count;
  }
  Node* find(uint64_t id) {
    for (Node* n = head.next; n != &head; n = n->next) {
      if (n->id == id) return n;
    }
    return nullptr;
  }
};

// Never destroyed: threads may exit (and deregister) after static destructors ran.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void onThreadExit(void* node) {
  ++tls_exit_rounds;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto* n = static_cast<Node*>(node);
  if (n->id != 0) r.unlink(*n);
  __atomic_store_n(&tls_call_word, 0, __ATOMIC_RELAXED);
}

bool busyIn(uint64_t word) { return (word & kCallDepthMask) != 0; }
uint64_t generationOf(uint64_t word) { return word >> 24; }
uint64_t load(const Node& n) { return __atomic_load_n(n.word, __ATOMIC_ACQUIRE); }

void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

uint64_t registerCallingThread() noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (tls_node.id == 0) {
    if (tls_exit_rounds >= PTHREAD_DESTRUCTOR_ITERATIONS) {
      // No round is left to unlink it: the node would outlive the thread's TLS.
      std::fputs("strata: a dispatcher call from a thread-exit destructor after the last round of them\n", stderr);
      std::abort();
    }
    tls_node = {r.next_id++, r.head.prev, &r.head, &tls_call_word};
    r.head.prev->next = &tls_node;
    r.head.prev = &tls_node;
    ++r.count;
    if (pthread_setspecific(r.key, &tls_node) != 0) {
      std::fputs("strata: cannot note this thread for grace periods (pthread_setspecific failed)\n", stderr);
      std::abort();
    }
  }
  __atomic_store_n(&tls_call_word, kFreshWord, __ATOMIC_RELAXED);
  return kFreshWord;
}

size_t registeredCallingThreads() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.count;
}

void registryForkPrepare() { registry().mu.lock(); }
void registryForkParent() { registry().mu.unlock(); }
void registryForkChild() {
  Registry& r = registry();
  for (Node* n = r.head.next; n != &r.head;) {
    Node* next = n->next;
    if (n != &tls_node) r.unlink(*n);
    n = next;
  }
  r.mu.unlock();
}

bool heavyBarrier() {
  enum Kind { kNone, kExpedited, kGlobal, kMprotect };
  static const Kind kind = [] {
    if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) return kExpedited;
    const long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL) != 0) return kGlobal;
#if defined(__x86_64__) || defined(__i386__)
    return kMprotect;
#else
    return kNone;
#endif
  }();
  switch (kind) {
    case kExpedited:
      return syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
    case kGlobal:
      return syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0;
    case kMprotect: {
      // Taking write access away shoots down the page's TLB entries on every CPU
      // that may cache them, by an interrupt that is a full barrier on each.
      static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      static void* const page = [] {
        void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? nullptr : p;
      }();
      static std::mutex mu;
      if (page == nullptr) return false;
      std::lock_guard<std::mutex> lock(mu);
      if (mprotect(page, size, PROT_READ | PROT_WRITE) != 0) return false;
      __atomic_store_n(static_cast<char*>(page), 0, __ATOMIC_RELAXED);  // resident, cached writable
      return mprotect(page, size, PROT_READ) == 0;
    }
    case kNone:
      break;
  }
  return false;
}

bool retiredKernelsAreFreed() { return heavyBarrier(); }

void GracePeriod::begin() noexcept {
  busy_.clear();
  every_thread_ = false;
  barrier_ = heavyBarrier();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Node* n = r.head.next; n != &r.head; n = n->next) {
    const uint64_t w = load(*n);
    if (!busyIn(w)) continue;
    try {
      busy_.emplace_back(n->id, generationOf(w));
    } catch (const std::bad_alloc&) {
      every_thread_ = true;  // out of memory: wait until every thread is seen out at once
      return;
    }
  }
}

bool GracePeriod::elapsed(int spins) noexcept {
  // A barrier that failed (a transient mprotect error) is tried again; a snapshot
  // taken later covers everything unpublished before the first one just as well.
  if (!barrier_) begin();
  if (!barrier_) return false;
  Registry& r = registry();
  // Whether thread n has left the section it was in (generation `gen`), re-reading
  // up to `spins` times. The calling thread cannot leave its own call while it waits.
  auto left = [&](const Node& n, bool any_generation, uint64_t gen) {
    const int tries = &n == &tls_node ? 1 : std::max(spins, 1);
    for (int i = 0; i < tries; ++i) {
      const uint64_t w = load(n);
      if (!busyIn(w) || (!any_generation && generationOf(w) != gen)) return true;
      pause();
    }
    return false;
  };
  std::lock_guard<std::mutex> lock(r.mu);
  if (every_thread_) {
    for (Node* n = r.head.next; n != &r.head; n = n->next) {
      if (!left(*n, /*any_generation=*/true, 0)) return false;
    }
    every_thread_ = false;
    return true;
  }
  std::erase_if(busy_, [&](const std::pair<uint64_t, uint64_t>& b) {
    const Node* n = r.find(b.first);
    return n == nullptr || left(*n, false, b.second);  // exited, or left
  });
  return busy_.empty();
}

}  // namespace strata::detail
