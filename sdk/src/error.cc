#include "strata/error.h"

#include <utility>

namespace strata {

const char* toString(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Value: return "ValueError";
    case ErrorKind::Type: return "TypeError";
    case ErrorKind::Index: return "IndexError";
    case ErrorKind::NotImplemented: return "NotImplementedError";
    case ErrorKind::Schema: return "SchemaError";
    case ErrorKind::Device: return "DeviceError";
    case ErrorKind::Internal: return "InternalError";
  }
  return "Error";
}

namespace detail {
void throwError(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

std::string shortened(std::string_view whole) {
  if (whole.size() <= 60) return std::string(whole);
  size_t cut = 57;
  while (cut > 0 && (static_cast<unsigned char>(whole[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(whole.substr(0, cut)) + "... (" + std::to_string(whole.size()) + " bytes)";
}

void internalAssertFail(const char* cond, const char* file, int line, const std::string& message) {
  throw Error(ErrorKind::Internal,
              concat("internal assert failed: ", cond, " at ", file, ":", line,
                     message.empty() ? "" : ": ", message,
                     " (this is a bug in strata, please report it)"));
}
}  // namespace detail

}  // namespace strata
