// Thread-local included and excluded dispatch key sets, and the RAII guards that
// change them.
//
// The key set of a call is (union of its tensor arguments' keys | included) -
// excluded, masked by the operator's non-fallthrough keys (Note [Computing the key
// set of a call] in dispatcher.h). A layer turns itself on for a scope by including
// its key (autocast enabled, a dispatch mode pushed) and steps out of the way for
// the ops its own kernel calls by excluding it, exactly as c10's
// IncludeDispatchKeyGuard / ExcludeDispatchKeyGuard do.
//
// Thread safety: the sets belong to the calling thread; a guard must be destroyed
// on the thread that made it (guards are neither copyable nor movable).
#pragma once

#include <cstdint>

#include "strata/dispatch_key.h"
#include "strata/export.h"

namespace strata {

struct RawLocalDispatchKeySet {
  uint64_t included;
  uint64_t excluded;
};

namespace detail {
// Every dispatched call reads this, from whichever library makes the call. __thread
// (no C++ init wrapper) and the initial-exec model make each read one %fs-relative
// load, also from plugins, which would otherwise call __tls_get_addr.
extern STRATA_API __thread RawLocalDispatchKeySet tls_local_dispatch_key_set
    __attribute__((tls_model("initial-exec")));
}  // namespace detail

struct LocalDispatchKeySet {
  DispatchKeySet included;
  DispatchKeySet excluded;
};

inline LocalDispatchKeySet tls_local_dispatch_key_set() {
  const RawLocalDispatchKeySet& raw = detail::tls_local_dispatch_key_set;
  return {DispatchKeySet::fromRaw(raw.included), DispatchKeySet::fromRaw(raw.excluded)};
}

// Replaces both sets; what the guards below use. Prefer the guards.
inline void tls_set_local_dispatch_key_set(LocalDispatchKeySet s) {
  detail::tls_local_dispatch_key_set = {s.included.raw(), s.excluded.raw()};
}

// Adds keys to the included set for a scope; restores the previous included set.
class IncludeDispatchKeyGuard {
 public:
  explicit IncludeDispatchKeyGuard(DispatchKeySet keys)
      : saved_(detail::tls_local_dispatch_key_set.included) {
    detail::tls_local_dispatch_key_set.included |= keys.raw();
  }
  explicit IncludeDispatchKeyGuard(DispatchKey k) : IncludeDispatchKeyGuard(DispatchKeySet(k)) {}
  IncludeDispatchKeyGuard(const IncludeDispatchKeyGuard&) = delete;
  IncludeDispatchKeyGuard& operator=(const IncludeDispatchKeyGuard&) = delete;
  ~IncludeDispatchKeyGuard() { detail::tls_local_dispatch_key_set.included = saved_; }

 private:
  uint64_t saved_;
};

// Adds keys to the excluded set for a scope; restores the previous excluded set.
class ExcludeDispatchKeyGuard {
 public:
  explicit ExcludeDispatchKeyGuard(DispatchKeySet keys)
      : saved_(detail::tls_local_dispatch_key_set.excluded) {
    detail::tls_local_dispatch_key_set.excluded |= keys.raw();
  }
  explicit ExcludeDispatchKeyGuard(DispatchKey k) : ExcludeDispatchKeyGuard(DispatchKeySet(k)) {}
  ExcludeDispatchKeyGuard(const ExcludeDispatchKeyGuard&) = delete;
  ExcludeDispatchKeyGuard& operator=(const ExcludeDispatchKeyGuard&) = delete;
  ~ExcludeDispatchKeyGuard() { detail::tls_local_dispatch_key_set.excluded = saved_; }

 private:
  uint64_t saved_;
};

}  // namespace strata
