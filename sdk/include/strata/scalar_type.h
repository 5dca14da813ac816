// Element types of tensors.
//
// The numeric values are PyTorch's c10::ScalarType codes, so a dtype passed as an
// int in a boxed call (schema type `ScalarType`) means the same thing in both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "strata/error.h"
#include "strata/export.h"
#include "strata/half.h"

namespace strata {

enum class ScalarType : int8_t {
  Byte = 0,    // uint8
  Char = 1,    // int8
  Int = 3,     // int32
  Long = 4,    // int64
  Half = 5,    // float16
  Float = 6,   // float32
  Double = 7,  // float64
  Bool = 11,
  BFloat16 = 15,
};

// kFloat32 etc. read like torch.float32.
inline constexpr ScalarType kFloat32 = ScalarType::Float;
inline constexpr ScalarType kFloat64 = ScalarType::Double;
inline constexpr ScalarType kFloat16 = ScalarType::Half;
inline constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
inline constexpr ScalarType kInt64 = ScalarType::Long;
inline constexpr ScalarType kInt32 = ScalarType::Int;
inline constexpr ScalarType kInt8 = ScalarType::Char;
inline constexpr ScalarType kUInt8 = ScalarType::Byte;
inline constexpr ScalarType kBool = ScalarType::Bool;

// The torch-style name: "float32", "bfloat16", "int64", "bool", ...
STRATA_API const char* toString(ScalarType t);
// Accepts the torch names and their aliases ("float", "double", "half", "long",
// "int", "byte", "char"). Returns nullopt for anything else.
STRATA_API std::optional<ScalarType> scalarTypeFromString(std::string_view name);
// True for the codes listed in ScalarType; the others are refused with this check.
STRATA_API bool isValidScalarTypeCode(int64_t code);

constexpr size_t elementSize(ScalarType t) {
  switch (t) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Bool:
      return 1;
    case ScalarType::Half:
    case ScalarType::BFloat16:
      return 2;
    case ScalarType::Int:
    case ScalarType::Float:
      return 4;
    case ScalarType::Long:
    case ScalarType::Double:
      return 8;
  }
  return 0;
}

constexpr bool isFloatingType(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half ||
         t == ScalarType::BFloat16;
}

// C++ element type <-> ScalarType.
template <typename T>
struct CppTypeToScalarType;
#define STRATA_FORALL_SCALAR_TYPES(_) \
  _(uint8_t, Byte)                    \
  _(int8_t, Char)                     \
  _(int32_t, Int)                     \
  _(int64_t, Long)                    \
  _(::strata::Half, Half)             \
  _(float, Float)                     \
  _(double, Double)                   \
  _(bool, Bool)                       \
  _(::strata::BFloat16, BFloat16)

#define STRATA_DEFINE_CPP_TO_SCALAR(cpp, name) \
  template <>                                  \
  struct CppTypeToScalarType<cpp> {            \
    static constexpr ScalarType value = ScalarType::name; \
  };
STRATA_FORALL_SCALAR_TYPES(STRATA_DEFINE_CPP_TO_SCALAR)
#undef STRATA_DEFINE_CPP_TO_SCALAR

// STRATA_DISPATCH_ALL_TYPES(dtype, name, [&] { use scalar_t; }): runs the lambda
// with `scalar_t` bound to the C++ type of dtype.
#define STRATA_PRIVATE_CASE_TYPE(cpp, name, ...) \
  case ::strata::ScalarType::name: {             \
    using scalar_t = cpp;                        \
    return __VA_ARGS__();                        \
  }
#define STRATA_DISPATCH_ALL_TYPES(TYPE, NAME, ...)                                       \
  [&] {                                                                                  \
    const ::strata::ScalarType _st = (TYPE);                                             \
    switch (_st) {                                                                       \
      STRATA_PRIVATE_CASE_TYPE(uint8_t, Byte, __VA_ARGS__)                               \
      STRATA_PRIVATE_CASE_TYPE(int8_t, Char, __VA_ARGS__)                                \
      STRATA_PRIVATE_CASE_TYPE(int32_t, Int, __VA_ARGS__)                                \
      STRATA_PRIVATE_CASE_TYPE(int64_t, Long, __VA_ARGS__)                               \
      STRATA_PRIVATE_CASE_TYPE(::strata::Half, Half, __VA_ARGS__)                        \
      STRATA_PRIVATE_CASE_TYPE(float, Float, __VA_ARGS__)                                \
      STRATA_PRIVATE_CASE_TYPE(double, Double, __VA_ARGS__)                              \
      STRATA_PRIVATE_CASE_TYPE(bool, Bool, __VA_ARGS__)                                  \
      STRATA_PRIVATE_CASE_TYPE(::strata::BFloat16, BFloat16, __VA_ARGS__)                \
    }                                                                                    \
    STRATA_FAIL(Type, NAME, ": unsupported dtype code ", static_cast<int>(_st));         \
  }()

}  // namespace strata
