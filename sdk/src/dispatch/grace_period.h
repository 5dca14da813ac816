// Grace periods for what the dispatcher retires. See Note [Grace periods].
#pragma once

#include <cstdint>
#include <vector>

namespace strata::detail {

class GracePeriod {
 public:
  // Begins a grace period for everything unpublished before this call: one
  // process-wide memory barrier, then a note of each thread inside a call section.
  static GracePeriod start();
  // True once each noted thread has been seen outside every call section, or has
  // exited. Never blocks; re-reads a busy thread's depth up to `spins` times.
  bool elapsed(int spins);
  bool empty() const { return busy_.empty(); }

 private:
  std::vector<uint64_t> busy_;  // thread ids
};

// The process-wide barrier: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), or where
// the kernel lacks it, an mprotect() that makes every CPU running this process
// flush its TLB (and so order its memory accesses), as folly's
// asymmetricHeavyBarrier does.
void heavyBarrier();

}  // namespace strata::detail
