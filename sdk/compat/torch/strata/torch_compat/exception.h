// TORCH_CHECK and friends, c10::Error and c10::str, for PyTorch extension sources
// built against Strata (strata/torch_compat.h says what the shim covers).
//
// A failed TORCH_CHECK throws strata::Error (c10::Error is the same type) of kind
// Value, with the extension's message, or PyTorch's "Expected COND to be true, but
// got false." when it gives none: the host reports it as it reports any kernel's
// error. TORCH_CHECK_TYPE / _INDEX / _VALUE / _NOT_IMPLEMENTED pick the kind as
// PyTorch picks the Python exception. A failed TORCH_INTERNAL_ASSERT is kind
// Internal and names the file and line: a bug in the extension.
#pragma once

#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "strata/device.h"
#include "strata/error.h"
#include "strata/scalar_type.h"

namespace c10 {

using Error = strata::Error;

namespace detail {
// One part of a message: what operator<< prints, and the torch names of the enums
// Strata prints with toString() ("float32", "cuda").
template <typename T>
void streamOne(std::ostream& os, const T& v) {
  if constexpr (std::is_same_v<T, strata::ScalarType> || std::is_same_v<T, strata::DeviceType>) {
    os << toString(v);
  } else {
    os << v;
  }
}
}  // namespace detail

// The parts concatenated as operator<< prints them (c10::str).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream ss;
  (detail::streamOne(ss, args), ...);
  return ss.str();
}

namespace detail {
template <typename... Args>
std::string checkMessage(const char* cond, const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return str("Expected ", cond, " to be true, but got false.");
  } else {
    return str(args...);
  }
}
template <typename... Args>
std::string assertMessage(const char* cond, const char* file, int line, const Args&... args) {
  return str("INTERNAL ASSERT FAILED at \"", file, "\":", line, ": ", cond,
             sizeof...(Args) == 0 ? "" : ". ", args..., " (a bug in the extension, not in its caller)");
}
inline void warn(const std::string& message, const char* file, int line) {
  std::cerr << "Warning: " << message << " (" << file << ":" << line << ")\n";
}
}  // namespace detail

}  // namespace c10

// cond_text is the condition as written (stringified before macro expansion).
#define TORCH_CHECK_WITH_KIND_(kind, cond, cond_text, ...)                                             \
  do {                                                                                                 \
    if (__builtin_expect(!(cond), 0)) {                                                                \
      ::strata::detail::throwError(::strata::ErrorKind::kind,                                          \
                                   ::c10::detail::checkMessage(cond_text __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                                  \
  } while (0)

// TORCH_CHECK(cond, message parts...): a user error when cond is false. The parts are
// evaluated only then.
#define TORCH_CHECK(cond, ...) TORCH_CHECK_WITH_KIND_(Value, cond, #cond __VA_OPT__(, ) __VA_ARGS__)
#define TORCH_CHECK_VALUE(cond, ...) TORCH_CHECK_WITH_KIND_(Value, cond, #cond __VA_OPT__(, ) __VA_ARGS__)
#define TORCH_CHECK_TYPE(cond, ...) TORCH_CHECK_WITH_KIND_(Type, cond, #cond __VA_OPT__(, ) __VA_ARGS__)
#define TORCH_CHECK_INDEX(cond, ...) TORCH_CHECK_WITH_KIND_(Index, cond, #cond __VA_OPT__(, ) __VA_ARGS__)
#define TORCH_CHECK_NOT_IMPLEMENTED(cond, ...) TORCH_CHECK_WITH_KIND_(NotImplemented, cond, #cond __VA_OPT__(, ) __VA_ARGS__)

// TORCH_INTERNAL_ASSERT(cond, message parts...): a broken invariant of the extension.
#define TORCH_INTERNAL_ASSERT(cond, ...)                                                                   \
  do {                                                                                                     \
    if (__builtin_expect(!(cond), 0)) {                                                                    \
      ::strata::detail::throwError(                                                                        \
          ::strata::ErrorKind::Internal,                                                                   \
          ::c10::detail::assertMessage(#cond, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__));             \
    }                                                                                                      \
  } while (0)
#ifdef NDEBUG
#define TORCH_INTERNAL_ASSERT_DEBUG_ONLY(...) \
  do {                                        \
  } while (0)
#else
#define TORCH_INTERNAL_ASSERT_DEBUG_ONLY(...) TORCH_INTERNAL_ASSERT(__VA_ARGS__)
#endif

// TORCH_WARN(message parts...): one line on stderr (PyTorch turns it into a Python
// warning; there is no Python here).
#define TORCH_WARN(...) ::c10::detail::warn(::c10::str(__VA_ARGS__), __FILE__, __LINE__)
#define TORCH_WARN_ONCE(...)                                           \
  do {                                                                 \
    static const bool torch_warned_once_ = [&] {                      \
      TORCH_WARN(__VA_ARGS__);                                         \
      return true;                                                     \
    }();                                                               \
    (void)torch_warned_once_;                                          \
  } while (0)
