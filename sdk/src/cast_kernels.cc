// See cast_kernels.h. Every select below is a blend the vectorizer can emit: each
// element computes all of its cases and keeps the one its class (zero or
// subnormal, normal, overflow, infinity or NaN) asks for.
#include "cast_kernels.h"

#include "sanitized.h"
#include "strata/half.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
// x86-64: the bfloat16 loops are also written for AVX2 and AVX-512F (8 and 16 floats
// a vector, integer instructions), and float16 uses the F16C instructions (IEEE round to nearest even, subnormals and NaNs as
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
// What the CPU offers, read once. STRATA_CASTS=portable takes the portable loops
// instead, STRATA_CASTS=avx2 stops short of AVX-512 and STRATA_CASTS=avx512 short of
// AVX512-BF16 (the tests run every path this machine has).
struct CpuFeatures {
  bool avx2 = false;
  bool f16c = false;
  bool avx512 = false;  // AVX-512F: 16 floats a vector, and its narrowing moves
  bool avx512bf16 = false;
};
const CpuFeatures kCpu = [] {
  CpuFeatures f;
  const char* cap = std::getenv("STRATA_CASTS");
  const std::string_view limit = cap != nullptr ? cap : "";
  if (!limit.empty() && limit != "portable" && limit != "avx2" && limit != "avx512") {
    std::fprintf(stderr, "strata: STRATA_CASTS=%s is not one of portable, avx2, avx512; the casts use what the CPU has\n",
                 cap);
  }
  if (limit == "portable") return f;
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.f16c = __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  // __builtin_cpu_supports also asks the OS (XGETBV) whether it saves the zmm state.
  f.avx512 = limit != "avx2" && f.avx2 && __builtin_cpu_supports("avx512f");
  // The compilers take target("avx512bf16") to imply AVX512BW, so that is asked too
  // (a VM may hide one and show the other).
  f.avx512bf16 = limit != "avx512" && f.avx512 && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512bf16");
  return f;
}();

// bfloat16 with integer vector instructions, element for element what bfloat16Of and
// bfloat16BitsToFloat compute, subnormals included (AVX512-BF16's VCVTNEPS2BF16
// flushes them to zero: see floatToBFloat16Bf16). The compiler's own vectorization of
// the scalar loop took 19 instructions per 8 floats (it narrows before it blends).
__attribute__((target("avx2"))) inline __m256i bfloat16Bits8(__m256i x) {
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}
__attribute__((target("avx2"))) void floatToBFloat16Avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bfloat16Bits8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b = bfloat16Bits8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // Every lane is at most 0xffff, so the saturating pack keeps it; it packs within
    // 128-bit halves, and the permute puts the four quarters back in order.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8));
  }
  for (; i < n; ++i) dst[i] = bfloat16Of(src[i]);
}
__attribute__((target("avx2"))) void bfloat16ToFloatAvx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x =
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))), 16);
    const __m256i is_nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_and_si256(is_nan, _mm256_set1_epi32(0x400000));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_or_si256(x, quiet));
  }
  for (; i < n; ++i) dst[i] = detail::bfloat16BitsToFloat(src[i]);
}
// GCC 12's avx512fintrin.h warns that its own _mm256_undefined_si256() "may be used
// uninitialized" (GCC bug 105593) where these narrow and widen; nothing here reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) inline __m256i bfloat16Bits16(__m512i x) {
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 is_nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rounded, is_nan, hi, _mm512_set1_epi32(0x40)));  // lanes <= 0xffff
}
__attribute__((target("avx512f"))) void floatToBFloat16Avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bfloat16Bits16(_mm512_loadu_si512(src + i)));
  }
  for (; i < n; ++i) dst[i] = bfloat16Of(src[i]);
}
// AVX512-BF16's VCVTNEPS2BF16 rounds normal numbers, infinities and NaNs exactly as
// bfloat16Of does (the SDM's convert_fp32_to_bfloat16: the same rounding bias, a NaN
// truncated with its quiet bit set; it reads no MXCSR and raises no flag), but turns
// a subnormal into a zero of its sign. A block of 16 with a subnormal in it takes the
// integer instructions instead; zeros are not subnormal, so ReLU's output stays fast.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void floatToBFloat16Bf16(const float* src, uint16_t* dst,
                                                                        int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    const __mmask16 subnormal = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(x, exponent), x, mantissa);
    const __m256i r = subnormal != 0 ? bfloat16Bits16(x) : (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(x));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), r);
  }
  for (; i < n; ++i) dst[i] = bfloat16Of(src[i]);
}
__attribute__((target("avx512f"))) void bfloat16ToFloatAvx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x =
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))), 16);
    const __mmask16 is_nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    _mm512_storeu_si512(dst + i, _mm512_mask_or_epi32(x, is_nan, x, _mm512_set1_epi32(0x400000)));
  }
  for (; i < n; ++i) dst[i] = detail::bfloat16BitsToFloat(src[i]);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
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

// A large copy in 32-byte loads and stores. On the Intel VM a 4 MB copy this way ran
// at ~26.7 GB/s against glibc memcpy's ~25.8 (its `rep movsb` at that size), which is
// PyTorch's vectorized copy loop against Strata's memmove in cast/copy_f32_1m.
#ifdef STRATA_CAST_X86
namespace {
__attribute__((target("avx2"))) void copyBytesAvx2(char* dst, const char* src, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
  }
  if (i < n) std::memcpy(dst + i, src + i, n - i);
}
}  // namespace
#endif

// Under a sanitizer memmove stays: it is checked once per call, where the loop's
// 32-byte accesses are each checked out of line (a fuzzer ran 8x fewer inputs).
constexpr bool kSanitized = STRATA_SANITIZED;

void copyBytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#ifdef STRATA_CAST_X86
  // Only past what the caches hold, where it is all bandwidth, and never for
  // overlapping ranges (memmove's job).
  constexpr size_t kLarge = size_t{1} << 20;
  if constexpr (kSanitized) return (void)std::memmove(d, s, n);
  const auto da = reinterpret_cast<uintptr_t>(d), sa = reinterpret_cast<uintptr_t>(s);
  if (kCpu.avx2 && n >= kLarge && (da + n <= sa || sa + n <= da)) return copyBytesAvx2(d, s, n);
#endif
  std::memmove(d, s, n);
}

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
  if (kCpu.avx512bf16) return floatToBFloat16Bf16(src, dst, n);
  if (kCpu.avx512) return floatToBFloat16Avx512(src, dst, n);
  if (kCpu.avx2) return floatToBFloat16Avx2(src, dst, n);
#endif
  floatToBFloat16Loop(src, dst, n);
}

void castBFloat16ToFloat(const uint16_t* src, float* dst, int64_t n) {
#ifdef STRATA_CAST_X86
  if (kCpu.avx512) return bfloat16ToFloatAvx512(src, dst, n);
  if (kCpu.avx2) return bfloat16ToFloatAvx2(src, dst, n);
#endif
  bfloat16ToFloatLoop(src, dst, n);
}

}  // namespace strata::detail
