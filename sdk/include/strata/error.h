// Errors raised by the SDK.
//
// A user error (a bad schema, a wrong argument, touching the data of a meta tensor)
// is a strata::Error with a kind and a message that says what was expected and what
// was given. A broken invariant is STRATA_INTERNAL_ASSERT, which names what broke:
// that is a bug in Strata, not in the caller.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "strata/export.h"

namespace strata {

enum class ErrorKind {
  Value,           // a value is out of range or malformed
  Type,            // a value has the wrong type (IValue accessors, dtypes)
  Index,           // an index or dimension is out of range
  NotImplemented,  // no kernel / no support for this combination
  Schema,          // a schema string does not parse or does not fit
  Device,          // a device is unavailable or cannot be used this way
  Internal,        // a broken invariant (see STRATA_INTERNAL_ASSERT)
};

STRATA_API const char* toString(ErrorKind kind);

class STRATA_API Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream ss;
  (ss << ... << args);
  return ss.str();
}
[[noreturn]] STRATA_API void throwError(ErrorKind kind, const std::string& message);
// A value as an error message quotes it: whole, or its start and its length when it
// is long (a command line may hold 100 KB of it), cut between UTF-8 characters.
STRATA_API std::string shortened(std::string_view whole);
[[noreturn]] STRATA_API void internalAssertFail(const char* cond, const char* file, int line,
                                                const std::string& message);
}  // namespace detail

}  // namespace strata

// STRATA_CHECK(cond, Kind, parts...): throws strata::Error(ErrorKind::Kind, parts...)
// when cond is false. The message parts are only evaluated on failure.
#define STRATA_CHECK(cond, kind, ...)                                                 \
  do {                                                                                \
    if (__builtin_expect(!(cond), 0)) {                                               \
      ::strata::detail::throwError(::strata::ErrorKind::kind,                         \
                                   ::strata::detail::concat(__VA_ARGS__));            \
    }                                                                                 \
  } while (0)

#define STRATA_FAIL(kind, ...) \
  ::strata::detail::throwError(::strata::ErrorKind::kind, ::strata::detail::concat(__VA_ARGS__))

#define STRATA_INTERNAL_ASSERT(cond, ...)                                             \
  do {                                                                                \
    if (__builtin_expect(!(cond), 0)) {                                               \
      ::strata::detail::internalAssertFail(#cond, __FILE__, __LINE__,                 \
                                           ::strata::detail::concat("" __VA_ARGS__)); \
    }                                                                                 \
  } while (0)
