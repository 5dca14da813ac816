#include "strata/scalar_type.h"

#include <array>
#include <utility>

namespace strata {

const char* toString(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: return "uint8";
    case ScalarType::Char: return "int8";
    case ScalarType::Int: return "int32";
    case ScalarType::Long: return "int64";
    case ScalarType::Half: return "float16";
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Bool: return "bool";
    case ScalarType::BFloat16: return "bfloat16";
  }
  return "unknown dtype";
}

std::optional<ScalarType> scalarTypeFromString(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, ScalarType>, 16> kNames{{
      {"float32", ScalarType::Float},   {"float", ScalarType::Float},
      {"float64", ScalarType::Double},  {"double", ScalarType::Double},
      {"float16", ScalarType::Half},    {"half", ScalarType::Half},
      {"bfloat16", ScalarType::BFloat16},
      {"int64", ScalarType::Long},      {"long", ScalarType::Long},
      {"int32", ScalarType::Int},       {"int", ScalarType::Int},
      {"int8", ScalarType::Char},       {"char", ScalarType::Char},
      {"uint8", ScalarType::Byte},      {"byte", ScalarType::Byte},
      {"bool", ScalarType::Bool},
  }};
  for (const auto& [n, t] : kNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

bool isValidScalarTypeCode(int64_t code) {
  switch (code) {
    case 0: case 1: case 3: case 4: case 5: case 6: case 7: case 11: case 15:
      return true;
    default:
      return false;
  }
}

}  // namespace strata
