// The debug string of a registration the modes library makes for its caller.
#pragma once

#include <source_location>
#include <string>

namespace strata::modes::detail {

// "registered at file.cc:12": where the caller's register_* call is.
inline std::string registeredAt(const std::source_location& loc) {
  return std::string("registered at ") + loc.file_name() + ":" + std::to_string(loc.line());
}

}  // namespace strata::modes::detail
