#include "grace_period.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

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
//   CallSection (strata/call_section.h): the thread's word tls_call_depth counts
//   the sections it is inside. Entering is a plain store ordered before the slot
//   read by the compiler only; leaving is a release store. No fence, no atomic
//   read-modify-write, no shared cache line: each thread writes its own word.
// - Registry. A thread's first call adds its word to a registry (a slow path taken
//   once per thread); a thread_local's destructor removes it at thread exit.
// - Reclaimer. The dispatcher hands everything unpublished so far to a grace period
//   (GracePeriod::start): heavyBarrier() makes every CPU running a thread of this
//   process execute a full barrier, so a thread whose entry store was still in its
//   store buffer has it visible by then; then each registered thread's word is
//   read. A thread at depth 0 holds nothing old: its next section starts after the
//   barrier and reads the new slots. A thread inside a section may hold an old
//   kernel: the grace period waits until its word is seen at depth 0 (an acquire
//   load pairing with the release at the section's exit). A thread that registers
//   after the snapshot reads the slots after it (both take the registry's mutex).
// - Nothing blocks. The dispatcher tries to end grace periods after each removal
//   and when Dispatcher::reclaimRetiredKernels() is called (the serving host calls
//   it at each poll); a grace period that is still waiting is checked again then.
//
// The bound: a retired kernel is freed at the first attempt after every thread that
// was inside a call when its grace period started has left that call. A thread that
// stays inside one call for ever (a kernel that never returns) holds back what was
// retired after it entered, and nothing else. Retiring during an open registration
// batch starts no grace period until the batch publishes (Note [Registration
// batches]): until then the old kernel is still in the table.

namespace strata::detail {

__thread uint64_t tls_call_depth __attribute__((tls_model("initial-exec"))) = 0;

namespace {

struct Registry {
  std::mutex mu;
  struct Entry {
    uint64_t id;
    uint64_t* word;
  };
  std::vector<Entry> threads;
  uint64_t next_id = 1;
};

void forkPrepare();
void forkParent();
void forkChild();

// Never destroyed: threads may leave (and their thread_locals deregister) after
// static destructors ran.
Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    pthread_atfork(forkPrepare, forkParent, forkChild);
    return reg;
  }();
  return *r;
}

// Removes the thread from the registry when it exits.
struct ThreadRecord {
  uint64_t id = 0;
  ~ThreadRecord() {
    if (id == 0) return;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::erase_if(r.threads, [this](const Registry::Entry& e) { return e.id == id; });
    __atomic_store_n(&tls_call_depth, 0, __ATOMIC_RELAXED);
    id = 0;
  }
};
thread_local ThreadRecord t_record;

// fork() copies one thread: the child's registry keeps that thread alone (the others'
// words would be read after their memory is gone, and a copied depth never drops).
void forkPrepare() { registry().mu.lock(); }
void forkParent() { registry().mu.unlock(); }
void forkChild() {
  Registry& r = registry();
  std::erase_if(r.threads, [](const Registry::Entry& e) { return e.id != t_record.id; });
  r.mu.unlock();
}

uint64_t depthOf(uint64_t word) { return word & ~kCallingThreadRegistered; }

}  // namespace

uint64_t registerCallingThread() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (t_record.id == 0) {
    t_record.id = r.next_id++;
    r.threads.push_back({t_record.id, &tls_call_depth});
  }
  __atomic_store_n(&tls_call_depth, kCallingThreadRegistered, __ATOMIC_RELAXED);
  return kCallingThreadRegistered;
}

void heavyBarrier() {
  static const bool expedited = [] {
    return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }();
  if (expedited && syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
  // Changing a page's protection shoots down its TLB entries on every CPU that may
  // cache them, by an interrupt that is a full barrier on each.
  static std::mutex mu;
  static void* page = [] {
    void* p = mmap(nullptr, static_cast<size_t>(sysconf(_SC_PAGESIZE)), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }();
  std::lock_guard<std::mutex> lock(mu);
  if (page == nullptr) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return;
  }
  const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  mprotect(page, size, PROT_READ | PROT_WRITE);
  __atomic_store_n(static_cast<volatile char*>(page), 0, __ATOMIC_RELAXED);  // make it resident
  mprotect(page, size, PROT_READ);
}

GracePeriod GracePeriod::start() {
  heavyBarrier();
  GracePeriod gp;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& e : r.threads) {
    if (depthOf(__atomic_load_n(e.word, __ATOMIC_ACQUIRE)) != 0) gp.busy_.push_back(e.id);
  }
  return gp;
}

bool GracePeriod::elapsed(int spins) {
  if (busy_.empty()) return true;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase_if(busy_, [&](uint64_t id) {
    auto it = std::find_if(r.threads.begin(), r.threads.end(), [id](const Registry::Entry& e) { return e.id == id; });
    if (it == r.threads.end()) return true;  // exited
    // The calling thread cannot leave its own call while it waits here.
    const int tries = id == t_record.id ? 1 : std::max(spins, 1);
    for (int i = 0; i < tries; ++i) {
      if (depthOf(__atomic_load_n(it->word, __ATOMIC_ACQUIRE)) == 0) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    return false;
  });
  return busy_.empty();
}

}  // namespace strata::detail
