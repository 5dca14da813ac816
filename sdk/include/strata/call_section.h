// Which threads are inside a dispatched call: what lets the dispatcher free the
// kernels it retires without a lock or a reference count on the call path. See
// Note [Grace periods] in sdk/src/dispatch/grace_period.cc.
//
// Every call the dispatcher makes (typed, boxed, redispatch) runs inside a
// CallSection. A kernel, rule or table entry read from the dispatcher stays valid
// until the thread's outermost section ends; code that keeps such a pointer outside
// a call (OperatorHandle::lookup, findRule, slotSource) holds a strata::CallScope.
#pragma once

#include <cstddef>
#include <cstdint>

#include "strata/export.h"

namespace strata {
namespace detail {

// A thread's call word: the high bits are a generation, advanced by each outermost
// call as it starts; the low bits count the call sections the thread is inside (0:
// none). The reclaimer thus sees "left the call it was in" either as depth 0 or as
// a new generation, however briefly the thread stays out (Note [Grace periods]).
// Every access is the whole word: a narrower store followed by a wider load would
// stall the next call's entry (no store-to-load forwarding). Zero until the
// thread's first call (or once its generation wraps, 2^40 calls later: it then
// registers again). As tls_local_dispatch_key_set, initial-exec so plugins read it
// with one %fs load.
extern STRATA_API __thread uint64_t tls_call_word __attribute__((tls_model("initial-exec")));
// 24 bits of depth (a stack overflows long before), 40 of generation; both steps fit
// an instruction's 32-bit immediate, so the entry needs no register for them.
inline constexpr uint64_t kCallGeneration = uint64_t{1} << 24;
inline constexpr uint64_t kCallDepthMask = kCallGeneration - 1;

// Adds the calling thread to the registry the reclaimer reads (allocating nothing),
// and returns its fresh word: depth 0, generation 1.
STRATA_API uint64_t registerCallingThread() noexcept;

// One level of "this thread may hold a pointer the dispatcher retires". The entry
// store is ordered before the table read by the compiler only: the reclaimer's
// process-wide barrier orders it for the CPU. Both stores are releases (plain
// stores on x86), so what a call read happens-before the reclaimer's acquire load
// that sees the thread leave.
struct CallSection {
  __attribute__((always_inline)) CallSection() noexcept {
    uint64_t w = tls_call_word;
    if (__builtin_expect(w == 0, 0)) w = registerCallingThread();
    __atomic_store_n(&tls_call_word, (w & kCallDepthMask) == 0 ? w + kCallGeneration + 1 : w + 1, __ATOMIC_RELEASE);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
  }
  __attribute__((always_inline)) ~CallSection() {
    __atomic_store_n(&tls_call_word, tls_call_word - 1, __ATOMIC_RELEASE);
  }
  CallSection(const CallSection&) = delete;
  CallSection& operator=(const CallSection&) = delete;
};

// How many threads the registry holds (for tests).
STRATA_API size_t registeredCallingThreads();
// Whether this process has the process-wide barrier grace periods need; without
// one, retired kernels are kept, never freed (Note [Grace periods]).
STRATA_API bool retiredKernelsAreFreed();

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
