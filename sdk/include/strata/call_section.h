// Which threads are inside a dispatched call: what lets the dispatcher free the
// kernels it retires without a lock or a reference count on the call path. See
// Note [Grace periods] in sdk/src/dispatch/grace_period.cc.
//
// Every call the dispatcher makes (typed, boxed, redispatch) runs inside a
// CallSection. A kernel, rule or table entry read from the dispatcher stays valid
// until the thread's outermost section ends; code that keeps such a pointer outside
// a call (OperatorHandle::lookup, findRule, slotSource) holds a strata::CallScope.
#pragma once

#include <cstdint>

#include "strata/export.h"

namespace strata {
namespace detail {

// Bit 63: the thread is in the registry the reclaimer reads; the low bits: how many
// call sections it is inside. Zero until the thread's first call. As
// tls_local_dispatch_key_set, initial-exec so plugins read it with one %fs load.
inline constexpr uint64_t kCallingThreadRegistered = uint64_t{1} << 63;
extern STRATA_API __thread uint64_t tls_call_depth __attribute__((tls_model("initial-exec")));

// Adds the calling thread to the registry; returns kCallingThreadRegistered.
STRATA_API uint64_t registerCallingThread();

// One level of "this thread may hold a pointer the dispatcher retires". The entry
// store is ordered before the table read by the compiler only: the reclaimer's
// process-wide barrier orders it for the CPU. The exit store is a release, so what
// the call read happens-before the reclaimer's acquire load that sees it leave.
struct CallSection {
  __attribute__((always_inline)) CallSection() noexcept {
    uint64_t w = tls_call_depth;
    if (__builtin_expect(w == 0, 0)) w = registerCallingThread();
    __atomic_store_n(&tls_call_depth, w + 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
  }
  __attribute__((always_inline)) ~CallSection() {
    __atomic_store_n(&tls_call_depth, __atomic_load_n(&tls_call_depth, __ATOMIC_RELAXED) - 1, __ATOMIC_RELEASE);
  }
  CallSection(const CallSection&) = delete;
  CallSection& operator=(const CallSection&) = delete;
};

inline bool insideCallSection() { return (tls_call_depth & ~kCallingThreadRegistered) != 0; }

}  // namespace detail

// Keeps what the dispatcher retires while it lives on this thread from being freed:
// for code that reads a kernel (OperatorHandle::lookup, slotSource) or a rule
// payload (findRule) outside a dispatched call and uses it afterwards. Inside a
// kernel there is no need: the call that runs it is one already. Not movable; destroy
// it on the thread that made it, and do not block in it for long (nothing retired
// meanwhile is freed until it ends).
class CallScope {
 public:
  CallScope() = default;
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  detail::CallSection section_;
};

}  // namespace strata
