#include "strata/infer_schema.h"

namespace strata::detail::infer {

std::string aliasSetName(size_t index) {
  std::string name(1, static_cast<char>('a' + index % 26));
  if (index >= 26) name += std::to_string(index / 26);
  return name;
}

}  // namespace strata::detail::infer
