// What the modes library's register_* functions share: the debug string of a
// registration they make for their caller, and the check that refuses a second rule.
#pragma once

#include <source_location>
#include <string>

#include "strata/dispatcher.h"
#include "strata/library.h"

namespace strata::modes::detail {

// "registered at file.cc:12": where the caller's register_* call is.
inline std::string registeredAt(const std::source_location& loc) {
  return std::string("registered at ") + loc.file_name() + ":" + std::to_string(loc.line());
}

// A rule is a kernel at its layer's key: a second one for (op, key) is refused, naming
// the first one's owner, unless allow_override. (The dispatcher refuses it too; this
// check says it in the layer's words.) `call` begins the message
// ("register_vmap(ns::op)"), `what` names the rule ("a batching rule").
inline void refuseSecondRule(const OperatorName& op, DispatchKey key, const std::string& call, const std::string& what,
                             const std::string& debug) {
  for (const RegistrationInfo& ri : Dispatcher::singleton().registrations(op)) {
    if (ri.what == RegistrationInfo::What::Impl && ri.key == key) {
      STRATA_FAIL(Value, call, ": ", op.str(), " already has ", what, ", registered by '", ri.owner, "' (", ri.debug,
                  "); the new one, by '", RegistrationOwnerGuard::current(), "' (", debug,
                  "), is refused. Pass allow_override to replace it.");
    }
  }
}

}  // namespace strata::modes::detail
