// See cast_kernels.h. Every select below is a blend the vectorizer can emit: each
// element computes all of its cases and keeps the one its class (zero or
// subnormal, normal, overflow, infinity or NaN) asks for.
#include "cast_kernels.h"

#include <bit>

namespace strata::detail {

namespace {

inline uint16_t halfOf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even.
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5f lines the value's 2^-24 units up with the low mantissa
  // bits of a float whose ulp is 2^-24, so the FPU rounds to nearest even.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  // NaN: the top payload bits, with the quiet bit forced so it stays a NaN.
  const uint32_t nan_or_inf = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : 0x7c00u;
  uint32_t r = a < 0x38800000u ? subnormal : normal;
  r = a >= 0x477ff000u ? 0x7c00u : r;  // >= 65520 rounds to infinity
  r = a >= 0x7f800000u ? nan_or_inf : r;
  return static_cast<uint16_t>(sign | r);
}

inline uint16_t bfloat16Of(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;  // truncated, quiet bit set
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float floatOfHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  const uint32_t normal = sign | ((exp + 112u) << 23) | (mant << 13);
  const uint32_t nan_or_inf = sign | 0x7f800000u | (mant << 13);
  // Zero or subnormal: mant * 2^-24, exact in float.
  const uint32_t subnormal = sign | std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f);
  uint32_t r = exp == 0x1fu ? nan_or_inf : normal;
  r = exp == 0 ? subnormal : r;
  return std::bit_cast<float>(r);
}

}  // namespace

void castFloatToHalf(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = halfOf(src[i]);
}

void castFloatToBFloat16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16Of(src[i]);
}

void castHalfToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = floatOfHalf(src[i]);
}

void castBFloat16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

}  // namespace strata::detail
