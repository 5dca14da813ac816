// Contiguous float32 <-> float16 / bfloat16 conversion loops: what a cast (core::to,
// copy_) runs on CPU when both tensors are contiguous. Each element is converted
// exactly as the scalar conversions in strata/half.h convert it (round to nearest,
// ties to even; infinities, NaNs and subnormals kept), bit for bit, but the loops are
// written without branches so that the compiler vectorizes them (cast_kernels.cc is
// built with -O3 -fno-trapping-math; `-fopt-info-vec` shows all four loops vectorized).
// On x86-64 the bfloat16 loops are also written for AVX2 and AVX-512F, and float16
// uses F16C, where the CPU has them; the tests check every path this machine has
// (STRATA_CASTS=portable, =avx2, and the default) against the IEEE definitions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::detail {

void castFloatToHalf(const float* src, uint16_t* dst, int64_t n);
void castFloatToBFloat16(const float* src, uint16_t* dst, int64_t n);
void castHalfToFloat(const uint16_t* src, float* dst, int64_t n);
void castBFloat16ToFloat(const uint16_t* src, float* dst, int64_t n);
// memmove(dst, src, n), in vector loads and stores for a large copy of ranges that do
// not overlap where the CPU has AVX2 (STRATA_CASTS=portable: memmove always).
void copyBytes(void* dst, const void* src, size_t n);

}  // namespace strata::detail
