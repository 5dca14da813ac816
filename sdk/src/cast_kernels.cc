// See cast_kernels.h. Every select below is a blend the vectorizer can emit: each
// element computes all of its cases and keeps the one its class (zero or
// subnormal, normal, overflow, infinity or NaN) asks for.
#include "cast_kernels.h"

#include "strata/half.h"

#include <bit>
#include <cstdlib>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
// x86-64: the bfloat16 loops are also built for AVX2 (32-byte vectors), and float16
// uses the F16C instructions (IEEE round to nearest even, subnormals and NaNs as
// below, in hardware), where the CPU has them. The choice is made once, at load time,
// by a flag: not by ifunc (target_clones), whose resolvers run during relocation,
// before a sanitizer's runtime is ready, and crash TSan builds.
#define STRATA_CAST_X86 1
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

// The portable loops.
void floatToHalfLoop(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = halfOf(src[i]);
}
void halfToFloatLoop(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = floatOfHalf(src[i]);
}
void floatToBFloat16Loop(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16Of(src[i]);
}
void bfloat16ToFloatLoop(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::bfloat16BitsToFloat(src[i]);  // branch-free already
}

#ifdef STRATA_CAST_X86
// What the CPU offers, read once. STRATA_PORTABLE_CASTS=1 takes the portable loops
// instead (the tests run both).
struct CpuFeatures {
  bool avx2 = false;
  bool f16c = false;
};
const CpuFeatures kCpu = [] {
  CpuFeatures f;
  if (std::getenv("STRATA_PORTABLE_CASTS") != nullptr) return f;
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.f16c = __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return f;
}();

__attribute__((target("avx2"))) void floatToBFloat16Avx2(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16Of(src[i]);
}
__attribute__((target("avx2"))) void bfloat16ToFloatAvx2(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::bfloat16BitsToFloat(src[i]);
}
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
#ifdef STRATA_CAST_X86
  if (kCpu.f16c) return floatToHalfF16C(src, dst, n);
#endif
  floatToHalfLoop(src, dst, n);
}

void castHalfToFloat(const uint16_t* src, float* dst, int64_t n) {
#ifdef STRATA_CAST_X86
  if (kCpu.f16c) return halfToFloatF16C(src, dst, n);
#endif
  halfToFloatLoop(src, dst, n);
}

void castFloatToBFloat16(const float* src, uint16_t* dst, int64_t n) {
#ifdef STRATA_CAST_X86
  if (kCpu.avx2) return floatToBFloat16Avx2(src, dst, n);
#endif
  floatToBFloat16Loop(src, dst, n);
}

void castBFloat16ToFloat(const uint16_t* src, float* dst, int64_t n) {
#ifdef STRATA_CAST_X86
  if (kCpu.avx2) return bfloat16ToFloatAvx2(src, dst, n);
#endif
  bfloat16ToFloatLoop(src, dst, n);
}

}  // namespace strata::detail
