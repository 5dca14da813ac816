// Helpers shared by the dispatcher's tests.
#pragma once

#include <string>

#include "strata/error.h"

namespace strata::testing {

// Runs f and returns the message of the strata::Error it throws ("" if none).
template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata::testing
