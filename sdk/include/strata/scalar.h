// A number of any dtype: what `Scalar` means in a schema, and what fill values are.
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>
#include <type_traits>

#include "strata/export.h"
#include "strata/half.h"

namespace strata {

namespace detail {
// A float to an integer type. C++ leaves NaN, infinities and values out of the
// target's range undefined; Strata gives what PyTorch gives on x86-64 (where the
// conversion instruction returns the "integer indefinite" value): int64 and int32
// get their minimum, narrower types go through int32 (uint8 through int64, as c10's
// TypeCast does) and wrap. So -2.5 -> uint8 is 254, 300.0 -> int8 is 44, NaN ->
// int64 is INT64_MIN, and every input has one defined answer.
template <typename Wide, typename F>
inline Wide truncateOrIndefinite(F v) {
  // The range [min, max + 1) of Wide, exactly representable as powers of two.
  constexpr F lo = static_cast<F>(std::numeric_limits<Wide>::min());
  constexpr F hi = -lo;
  return v >= lo && v < hi ? static_cast<Wide>(v) : std::numeric_limits<Wide>::min();  // false for NaN
}
template <typename D, typename F>
inline D floatToInt(F v) {
  if constexpr (std::is_unsigned_v<D> && sizeof(D) >= 4) {
    // Wide unsigned types (not a tensor dtype): exact in range, else through int64.
    constexpr F hi = static_cast<F>(std::numeric_limits<D>::max() / 2 + 1) * F(2);
    if (v >= F(0) && v < hi) return static_cast<D>(v);
    return static_cast<D>(truncateOrIndefinite<int64_t>(v));
  } else if constexpr (sizeof(D) == 8 || std::is_same_v<D, uint8_t>) {
    return static_cast<D>(truncateOrIndefinite<int64_t>(v));
  } else if constexpr (sizeof(D) == 4 && std::is_signed_v<D>) {
    return static_cast<D>(truncateOrIndefinite<int32_t>(v));
  } else {
    return static_cast<D>(truncateOrIndefinite<int32_t>(v));
  }
}
}  // namespace detail

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
  // A double converts as detail::floatToInt says (NaN and out-of-range values defined).
  int64_t toLong() const { return kind_ == Kind::Double ? detail::floatToInt<int64_t>(v_.d) : v_.i; }
  bool toBool() const { return kind_ == Kind::Double ? v_.d != 0 : v_.i != 0; }

  // The value converted to T: C++ semantics where C++ defines them (Half/BFloat16 round
  // to nearest even), detail::floatToInt for a double to an integer type.
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return toBool();
    else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return T(static_cast<float>(toDouble()));
    else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(toDouble());
    else return kind_ == Kind::Double ? detail::floatToInt<T>(v_.d) : static_cast<T>(v_.i);
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
