// float16 / bfloat16 conversions against known IEEE 754 bit patterns.
#include "strata/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "strata/tensor.h"

namespace strata {
namespace {

float bitsToFloat(uint32_t b) { return std::bit_cast<float>(b); }

TEST(HalfTest, NormalValuesRoundTrip) {
  EXPECT_EQ(Half(1.0f).bits, 0x3C00);
  EXPECT_EQ(Half(-2.0f).bits, 0xC000);
  EXPECT_EQ(Half(0.1f).bits, 0x2E66);
  EXPECT_EQ(Half(1.0f / 3.0f).bits, 0x3555);
  EXPECT_EQ(Half(65504.0f).bits, 0x7BFF);  // largest finite half
  EXPECT_EQ(static_cast<float>(Half::fromBits(0x7BFF)), 65504.0f);
  EXPECT_EQ(static_cast<float>(Half::fromBits(0x3555)), 0.333251953125f);
}

TEST(HalfTest, RoundsToNearestTiesToEven) {
  // 1 + 2^-11 lies halfway between 1 (mantissa 0, even) and 1 + 2^-10 (odd).
  EXPECT_EQ(Half(1.0f + 0x1p-11f).bits, 0x3C00);
  // 1 + 3*2^-11 lies halfway between mantissa 1 (odd) and 2 (even).
  EXPECT_EQ(Half(1.0f + 3 * 0x1p-11f).bits, 0x3C02);
  // Just above the halfway point rounds up.
  EXPECT_EQ(Half(std::nextafter(1.0f + 0x1p-11f, 2.0f)).bits, 0x3C01);
}

TEST(HalfTest, OverflowGoesToInfinity) {
  EXPECT_EQ(Half(65519.0f).bits, 0x7BFF);  // below the halfway point to 2^16
  EXPECT_EQ(Half(65520.0f).bits, 0x7C00);  // the halfway point rounds to even: inf
  EXPECT_EQ(Half(1e10f).bits, 0x7C00);
  EXPECT_EQ(Half(-1e10f).bits, 0xFC00);
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7C00);
  EXPECT_EQ(Half(-std::numeric_limits<float>::infinity()).bits, 0xFC00);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half::fromBits(0x7C00))));
}

TEST(HalfTest, SubnormalsAndZeros) {
  EXPECT_EQ(Half(0x1p-24f).bits, 0x0001);          // smallest subnormal
  EXPECT_EQ(Half(0x1p-25f).bits, 0x0000);          // exactly half of it: ties to even (0)
  EXPECT_EQ(Half(3 * 0x1p-25f).bits, 0x0002);      // 1.5 units: ties to even (2)
  EXPECT_EQ(Half(1023 * 0x1p-24f).bits, 0x03FF);   // largest subnormal
  EXPECT_EQ(Half(0x1p-14f).bits, 0x0400);          // smallest normal
  EXPECT_EQ(Half(1e-10f).bits, 0x0000);            // underflow to zero
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(static_cast<float>(Half::fromBits(0x0001)), 0x1p-24f);
  EXPECT_EQ(static_cast<float>(Half::fromBits(0x03FF)), 1023 * 0x1p-24f);
  EXPECT_TRUE(std::signbit(static_cast<float>(Half::fromBits(0x8000))));
}

TEST(HalfTest, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling NaN whose payload is only in the low bits must not become inf.
  const Half h(bitsToFloat(0x7F800001));
  EXPECT_EQ(h.bits & 0x7C00, 0x7C00);
  EXPECT_NE(h.bits & 0x03FF, 0);
  EXPECT_EQ(Half(bitsToFloat(0xFFC00000)).bits & 0x8000, 0x8000);  // sign kept
  EXPECT_TRUE(std::isnan(static_cast<float>(Half::fromBits(0x7E00))));
}

TEST(BFloat16Test, KnownPatterns) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3F80);
  EXPECT_EQ(BFloat16(-2.0f).bits, 0xC000);
  EXPECT_EQ(BFloat16(1.0f / 3.0f).bits, 0x3EAB);  // 0x3EAAAAAB rounds up
  EXPECT_EQ(static_cast<float>(BFloat16::fromBits(0x3F80)), 1.0f);
}

TEST(BFloat16Test, RoundsToNearestTiesToEven) {
  EXPECT_EQ(BFloat16(bitsToFloat(0x3F808000)).bits, 0x3F80);  // halfway, even stays
  EXPECT_EQ(BFloat16(bitsToFloat(0x3F818000)).bits, 0x3F82);  // halfway, odd rounds up
  EXPECT_EQ(BFloat16(bitsToFloat(0x3F808001)).bits, 0x3F81);  // above halfway
}

TEST(BFloat16Test, InfNaNSubnormals) {
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::infinity()).bits, 0x7F80);
  EXPECT_EQ(BFloat16(bitsToFloat(0x7F7FFFFF)).bits, 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(BFloat16(bitsToFloat(0x7FC00000)).bits, 0x7FC0);
  const BFloat16 snan(bitsToFloat(0x7F800001));  // payload only in the dropped bits
  EXPECT_TRUE(std::isnan(static_cast<float>(snan)));
  EXPECT_EQ(BFloat16(bitsToFloat(0x00000001)).bits, 0x0000);  // tiny subnormal rounds down
  EXPECT_EQ(BFloat16(bitsToFloat(0x00018000)).bits, 0x0002);  // subnormal tie to even
  EXPECT_EQ(BFloat16(bitsToFloat(0x00010000)).bits, 0x0001);  // exact subnormal
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
}

TEST(HalfTest, TensorConversionsUseTheSameRounding) {
  const Tensor t = from_vector<float>({1.0f + 0x1p-11f, 65520.0f, 0x1p-25f, 1.0f / 3.0f});
  const Tensor h = t.to(kFloat16);
  const auto* bits = reinterpret_cast<const uint16_t*>(h.data_ptr<Half>());
  EXPECT_EQ(bits[0], 0x3C00);
  EXPECT_EQ(bits[1], 0x7C00);
  EXPECT_EQ(bits[2], 0x0000);
  EXPECT_EQ(bits[3], 0x3555);
  const Tensor b = t.to(kBFloat16);
  EXPECT_EQ(b.data_ptr<BFloat16>()[3].bits, 0x3EAB);
  EXPECT_EQ(h.to(kFloat32).to_vector<float>()[3], 0.333251953125f);
}

}  // namespace
}  // namespace strata
