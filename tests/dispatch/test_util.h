// Helpers shared by the dispatcher's tests.
#pragma once

#include <string>

#include <gtest/gtest.h>

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

// The same for an error of one kind: a test failure when f throws another kind.
template <typename F>
std::string errorOf(ErrorKind kind, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace strata::testing
