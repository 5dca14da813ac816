// See cast_kernels.h. Every select below is a blend the vectorizer can emit: each
// element computes all of its cases and keeps the one its class (zero or
// subnormal, normal, overflow, infinity or NaN) asks for.
#include "cast_kernels.h"

#include "strata/half.h"

#include <bit>
#include <cstdlib>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
// x86-64: each loop is also built for x86-64-v3 (AVX2, 32-byte vectors), picked at
// load time by the CPU (ifunc); float16 uses the F16C instructions where the CPU has
// them (IEEE round to nearest even, subnormals and NaNs as below, in hardware).
#define STRATA_CAST_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define STRATA_HAVE_F16C_PATH 1
#else
#define STRATA_CAST_CLONES
#endif

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
  // Infinity, or a NaN with its payload and the quiet bit set (IEEE 754: a conversion
  // of a signaling NaN gives a quiet one, as F16C's does).
  const uint32_t nan_or_inf = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);
  // Zero or subnormal: mant * 2^-24, exact in float.
  const uint32_t subnormal = sign | std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f);
  uint32_t r = exp == 0x1fu ? nan_or_inf : normal;
  r = exp == 0 ? subnormal : r;
  return std::bit_cast<float>(r);
}

STRATA_CAST_CLONES void floatToHalfLoop(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = halfOf(src[i]);
}
STRATA_CAST_CLONES void halfToFloatLoop(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = floatOfHalf(src[i]);
}

#ifdef STRATA_HAVE_F16C_PATH
// STRATA_NO_F16C=1 takes the portable loops (the tests run both paths).
const bool kHaveF16C = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c") &&
                       std::getenv("STRATA_NO_F16C") == nullptr;

__attribute__((target("avx,f16c"))) void floatToHalfF16C(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = halfOf(src[i]);
}
__attribute__((target("avx,f16c"))) void halfToFloatF16C(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = floatOfHalf(src[i]);
}
#endif

}  // namespace

void castFloatToHalf(const float* src, uint16_t* dst, int64_t n) {
#ifdef STRATA_HAVE_F16C_PATH
  if (kHaveF16C) return floatToHalfF16C(src, dst, n);
#endif
  floatToHalfLoop(src, dst, n);
}

void castHalfToFloat(const uint16_t* src, float* dst, int64_t n) {
#ifdef STRATA_HAVE_F16C_PATH
  if (kHaveF16C) return halfToFloatF16C(src, dst, n);
#endif
  halfToFloatLoop(src, dst, n);
}

STRATA_CAST_CLONES void castFloatToBFloat16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16Of(src[i]);
}

STRATA_CAST_CLONES void castBFloat16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::bfloat16BitsToFloat(src[i]);  // branch-free already
}

}  // namespace strata::detail
