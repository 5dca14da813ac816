// float16 and bfloat16 storage types.
//
// Conversions round to nearest, ties to even, and keep infinities, NaNs (quieted,
// sign and top payload bits kept) and subnormals, bit for bit as IEEE 754 prescribes. They do
// not depend on the FPU's rounding mode except for the subnormal float16 path,
// which assumes the default round-to-nearest mode (as every C++ program starts).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace strata {

namespace detail {

inline uint16_t floatToHalfBits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or NaN
    if (a == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // NaN: keep the top payload bits, force the quiet bit so it stays a NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 -> inf
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): the result is subnormal or zero.
    // Adding 0.5f puts the value's 2^-24 units in the low mantissa bits of a float
    // whose ulp is exactly 2^-24, so the FPU performs the round-to-nearest-even.
    const float v = std::bit_cast<float>(a) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(v) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even.
  const uint32_t odd = (a >> 13) & 1u;
  a += 0xc8000fffu + odd;  // == a - (112 << 23) + 0xfff + odd (mod 2^32)
  return static_cast<uint16_t>(sign | (a >> 13));
}

inline float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  // Infinity, or a NaN with its payload, made quiet (IEEE 754: converting a
  // signaling NaN gives a quiet one).
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t floatToBFloat16Bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncate and set the quiet bit so a payload in the low bits is not lost
    // into an infinity.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  const uint32_t odd = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + odd) >> 16);
}

inline float bfloat16BitsToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  return std::bit_cast<float>((x & 0x7fffffffu) > 0x7f800000u ? (x | 0x400000u) : x);  // a NaN comes out quiet
}

}  // namespace detail

// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;

  Half() = default;
  Half(float f) : bits(detail::floatToHalfBits(f)) {}  // NOLINT: implicit like c10::Half
  static Half fromBits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  operator float() const { return detail::halfBitsToFloat(bits); }  // NOLINT
};

// bfloat16: the top half of a float32.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  BFloat16(float f) : bits(detail::floatToBFloat16Bits(f)) {}  // NOLINT
  static BFloat16 fromBits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  operator float() const { return detail::bfloat16BitsToFloat(bits); }  // NOLINT
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace strata
