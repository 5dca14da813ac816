// Grace periods for what the dispatcher retires. See Note [Grace periods].
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace strata::detail {

class GracePeriod {
 public:
  // Begins the grace period for everything unpublished before this call: one
  // process-wide memory barrier, then a note of each thread inside a call section
  // and of its generation.
  void begin() noexcept;
  // True once each noted thread has been seen outside every call section, or in a
  // later generation, or has exited. Never blocks; re-reads a busy thread's word up
  // to `spins` times. Never true when this process has no process-wide barrier.
  bool elapsed(int spins) noexcept;

 private:
  std::vector<std::pair<uint64_t, uint64_t>> busy_;  // (thread id, generation)
  bool barrier_ = false;
  // Out of memory while noting the busy threads: wait until every thread is seen out.
  bool every_thread_ = false;
};

// The process-wide barrier; false when there is none (Note [Grace periods]).
bool heavyBarrier();

// fork(): the dispatcher's handlers call these inside its own, so that one order of
// locks holds (Note [Grace periods]).
// Note [Deferred reclamation]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A removal tries to end a grace period at once (Note [Grace periods]): a
// membarrier() per removal. A Library that dies removes all its registrations in a
// row, so while a DeferReclaim lives on a thread, that thread's removals only
// retire what they remove, and one reclaim runs when the outermost DeferReclaim
// ends. Per thread and nothing else: it changes no table, opens no registration
// batch (which is one per process), and other threads' removals reclaim as usual.
class DeferReclaim {
 public:
  DeferReclaim() noexcept;
  ~DeferReclaim();
  DeferReclaim(const DeferReclaim&) = delete;
  DeferReclaim& operator=(const DeferReclaim&) = delete;
  static bool active() noexcept;
};

void registryForkPrepare();
void registryForkParent();
void registryForkChild();

}  // namespace strata::detail
