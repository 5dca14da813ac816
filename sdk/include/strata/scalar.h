// A number of any dtype: what `Scalar` means in a schema, and what fill values are.
#pragma once

#include <cstdint>
#include <ostream>
#include <type_traits>

#include "strata/export.h"
#include "strata/half.h"

namespace strata {

class STRATA_API Scalar {
 public:
  enum class Kind : uint8_t { Int, Double, Bool };

  Scalar() : Scalar(int64_t{0}) {}
  Scalar(double v) : kind_(Kind::Double) { v_.d = v; }  // NOLINT
  Scalar(float v) : Scalar(static_cast<double>(v)) {}   // NOLINT
  Scalar(bool v) : kind_(Kind::Bool) { v_.i = v; }      // NOLINT
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int) {  // NOLINT
    v_.i = static_cast<int64_t>(v);
  }
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool isFloatingPoint() const { return kind_ == Kind::Double; }
  bool isIntegral() const { return kind_ == Kind::Int; }
  bool isBoolean() const { return kind_ == Kind::Bool; }

  double toDouble() const { return kind_ == Kind::Double ? v_.d : static_cast<double>(v_.i); }
  int64_t toLong() const { return kind_ == Kind::Double ? static_cast<int64_t>(v_.d) : v_.i; }
  bool toBool() const { return kind_ == Kind::Double ? v_.d != 0 : v_.i != 0; }

  // The value converted to T with C++ semantics (Half/BFloat16 round to nearest even).
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return toBool();
    else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return T(static_cast<float>(toDouble()));
    else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(toDouble());
    else return kind_ == Kind::Double ? static_cast<T>(v_.d) : static_cast<T>(v_.i);
  }

  friend bool operator==(const Scalar& a, const Scalar& b) {
    if (a.kind_ != b.kind_) return false;
    return a.kind_ == Kind::Double ? a.v_.d == b.v_.d : a.v_.i == b.v_.i;
  }

 private:
  Kind kind_;
  union {
    double d;
    int64_t i;
  } v_;
};

STRATA_API std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace strata
