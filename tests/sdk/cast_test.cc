// float32 <-> float16 / bfloat16 casts of tensors, bit for bit against the IEEE 754
// definitions: every float16 and bfloat16 value, every rounding tie between two of
// them (and its neighbours), and a large random sample of float32 bit patterns. The
// reference below rounds with double arithmetic and nearbyint (round to nearest,
// ties to even), independently of the conversions under test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <random>
#include <functional>
#include <limits>
#include <vector>

#include "strata/ops.h"
#include "strata/tensor.h"

namespace strata {
namespace {

// The IEEE binary16 / bfloat16 nearest to x (ties to even). mant_bits: 10 or 7;
// min_exp: the exponent of the smallest normal (-14 or -126); bias: 15 or 127.
uint16_t referenceRound(float x, int mant_bits, int min_exp, int bias) {
  const uint16_t sign = std::signbit(x) ? uint16_t(1u << 15) : uint16_t(0);
  const uint16_t inf = static_cast<uint16_t>(((2 * bias + 1) << mant_bits));
  if (std::isnan(x)) return 0xffff;  // compared by class below
  if (std::isinf(x)) return sign | inf;
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0) return sign;
  int e2 = 0;
  std::frexp(a, &e2);
  const int e = e2 - 1;  // a = 1.f * 2^e
  const int eb = std::max(e, min_exp);
  const double ulp = std::ldexp(1.0, eb - mant_bits);
  const double r = std::nearbyint(a / ulp);  // exact quotient; rounds to nearest even
  uint32_t bits = e >= min_exp ? (static_cast<uint32_t>(eb + bias) << mant_bits) + static_cast<uint32_t>(r) -
                                     (1u << mant_bits)
                               : static_cast<uint32_t>(r);  // subnormal (r == 2^mant_bits is the smallest normal)
  if (bits > inf) bits = inf;
  return static_cast<uint16_t>(sign | bits);
}
uint16_t referenceHalf(float x) { return referenceRound(x, 10, -14, 15); }
uint16_t referenceBFloat16(float x) { return referenceRound(x, 7, -126, 127); }

// The exact value of a binary16 / bfloat16 bit pattern, as a float (always exact).
float referenceValue(uint16_t b, int mant_bits, int min_exp, int bias) {
  const int exp_bits = 15 - mant_bits;
  const int exp = (b >> mant_bits) & ((1 << exp_bits) - 1);
  const int mant = b & ((1 << mant_bits) - 1);
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  if (exp == (1 << exp_bits) - 1) return mant == 0 ? static_cast<float>(sign * INFINITY) : NAN;
  const double v = exp == 0 ? std::ldexp(mant, min_exp - mant_bits)
                            : std::ldexp(1.0 + std::ldexp(mant, -mant_bits), exp - bias);
  return static_cast<float>(sign * v);
}

Tensor halfTensor(const std::vector<uint16_t>& bits, ScalarType dtype) {
  Tensor t = empty({static_cast<int64_t>(bits.size())}, TensorOptions(dtype));
  std::memcpy(t.data_ptr(), bits.data(), bits.size() * 2);
  return t;
}
std::vector<uint16_t> bitsOf(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.contiguous().data_ptr(), out.size() * 2);
  return out;
}

bool isNaN16(uint16_t b, int mant_bits) {
  const uint16_t exp_mask = static_cast<uint16_t>(0x7fff & ~((1u << mant_bits) - 1));
  return (b & exp_mask) == exp_mask && (b & ((1u << mant_bits) - 1)) != 0;
}

struct Format {
  ScalarType dtype;
  int mant_bits, min_exp, bias;
  uint16_t (*reference)(float);
};
const Format kHalf{ScalarType::Half, 10, -14, 15, &referenceHalf};
const Format kBF16{ScalarType::BFloat16, 7, -126, 127, &referenceBFloat16};

// Casts floats with ops::to (the contiguous, vectorized path) and with a strided
// view (the element-by-element path), and checks both against the reference.
void expectRoundsLikeIEEE(const std::vector<float>& xs, const Format& f) {
  const Tensor src = from_vector(xs);
  const std::vector<uint16_t> got = bitsOf(ops::to(src, f.dtype));
  // The same values through a non-contiguous source: a column of a 2-column matrix.
  std::vector<float> two(xs.size() * 2, 0.0f);
  for (size_t i = 0; i < xs.size(); ++i) two[2 * i] = xs[i];
  const Tensor column = ops::select(from_vector(two, std::vector<int64_t>{static_cast<int64_t>(xs.size()), 2}), 1, 0);
  ASSERT_FALSE(column.is_contiguous());
  const std::vector<uint16_t> strided = bitsOf(ops::to(column, f.dtype));
  size_t bad = 0;
  for (size_t i = 0; i < xs.size() && bad < 10; ++i) {
    const float x = xs[i];
    if (std::isnan(x)) {
      // NaN stays NaN, sign kept, quiet bit set.
      const uint32_t xb = std::bit_cast<uint32_t>(x);
      const bool ok = isNaN16(got[i], f.mant_bits) && ((got[i] >> 15) == (xb >> 31)) &&
                      (got[i] & (1u << (f.mant_bits - 1))) != 0 && got[i] == strided[i];
      if (!ok) ++bad;
      EXPECT_TRUE(ok) << std::hex << "NaN 0x" << xb << " -> 0x" << got[i];
      continue;
    }
    const uint16_t want = f.reference(x);
    if (got[i] != want || strided[i] != want) ++bad;
    EXPECT_EQ(got[i], want) << std::hex << "float 0x" << std::bit_cast<uint32_t>(x) << " (" << x << ")";
    EXPECT_EQ(strided[i], want) << std::hex << "strided, float 0x" << std::bit_cast<uint32_t>(x);
  }
}

void expectEveryValueWidensExactly(const Format& f) {
  std::vector<uint16_t> all(1 << 16);
  for (uint32_t b = 0; b < all.size(); ++b) all[b] = static_cast<uint16_t>(b);
  const std::vector<float> got = ops::to(halfTensor(all, f.dtype), ScalarType::Float).to_vector<float>();
  size_t bad = 0;
  for (uint32_t b = 0; b < all.size() && bad < 10; ++b) {
    const float want = referenceValue(static_cast<uint16_t>(b), f.mant_bits, f.min_exp, f.bias);
    if (std::isnan(want)) {
      // The payload moves to the top of the float's mantissa, the sign stays, and a
      // signaling NaN comes out quiet (IEEE 754's rule for conversions).
      const uint32_t gb = std::bit_cast<uint32_t>(got[b]);
      const uint32_t payload = b & ((1u << f.mant_bits) - 1), quiet = 1u << (f.mant_bits - 1);
      const bool ok = std::isnan(got[b]) && (gb >> 31) == (b >> 15) && (gb & 0x400000u) != 0 &&
                      ((gb >> (23 - f.mant_bits)) & ((1u << f.mant_bits) - 1)) == (payload | quiet);
      if (!ok) ++bad;
      EXPECT_TRUE(ok) << std::hex << "0x" << b;
      continue;
    }
    if (std::bit_cast<uint32_t>(got[b]) != std::bit_cast<uint32_t>(want)) ++bad;
    EXPECT_EQ(std::bit_cast<uint32_t>(got[b]), std::bit_cast<uint32_t>(want)) << std::hex << "0x" << b;
  }
  // And every value that is not a NaN comes back to the same bits.
  const std::vector<uint16_t> back = bitsOf(ops::to(from_vector(got), f.dtype));
  for (uint32_t b = 0; b < all.size(); ++b) {
    if (!isNaN16(static_cast<uint16_t>(b), f.mant_bits)) ASSERT_EQ(back[b], b) << std::hex << "0x" << b;
  }
}

// Every tie between two neighbouring values, and the floats just beside it.
std::vector<float> tiesAndNeighbours(const Format& f) {
  std::vector<float> xs;
  for (uint32_t b = 0; b < 0x7fff; ++b) {
    const float lo = referenceValue(static_cast<uint16_t>(b), f.mant_bits, f.min_exp, f.bias);
    const float hi = referenceValue(static_cast<uint16_t>(b + 1), f.mant_bits, f.min_exp, f.bias);
    if (!std::isfinite(lo) || std::isnan(hi)) continue;
    const double mid_d = (static_cast<double>(lo) + (std::isinf(hi) ? std::ldexp(1.0, f.bias + 1) : hi)) / 2;
    const float mid = static_cast<float>(mid_d);
    if (static_cast<double>(mid) != mid_d) continue;  // not a float: no tie to test
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  return xs;
}

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> xs(n);
  for (float& x : xs) x = std::bit_cast<float>(static_cast<uint32_t>(gen()));
  // The specials, whatever the draw.
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f,
                  0x1p-126f, 0x1p-149f, std::numeric_limits<float>::max(), std::bit_cast<float>(0x7f800001u),
                  std::bit_cast<float>(0xff812345u)}) {
    xs.push_back(s);
  }
  return xs;
}

TEST(CastTest, EveryFloat16WidensExactlyAndComesBack) { expectEveryValueWidensExactly(kHalf); }
TEST(CastTest, EveryBFloat16WidensExactlyAndComesBack) { expectEveryValueWidensExactly(kBF16); }

TEST(CastTest, Float16TiesRoundToEven) { expectRoundsLikeIEEE(tiesAndNeighbours(kHalf), kHalf); }
TEST(CastTest, BFloat16TiesRoundToEven) { expectRoundsLikeIEEE(tiesAndNeighbours(kBF16), kBF16); }

TEST(CastTest, RandomFloat32ToFloat16) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  expectRoundsLikeIEEE(randomFloats(1 << 21, 12345), kHalf);
}
TEST(CastTest, RandomFloat32ToBFloat16) { expectRoundsLikeIEEE(randomFloats(1 << 21, 54321), kBF16); }

TEST(CastTest, OddLengthsAndEmptyTensors) {
  // Lengths around the vector width: the loops' tails convert like their bodies.
  for (int64_t n : {0, 1, 3, 7, 8, 9, 15, 17, 33}) {
    std::vector<float> xs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) xs[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i) * 0x1p-11f;
    const Tensor h = ops::to(from_vector(xs), ScalarType::Half);
    const Tensor b = ops::to(from_vector(xs), ScalarType::BFloat16);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(bitsOf(h)[static_cast<size_t>(i)], referenceHalf(xs[static_cast<size_t>(i)]));
      EXPECT_EQ(bitsOf(b)[static_cast<size_t>(i)], referenceBFloat16(xs[static_cast<size_t>(i)]));
    }
    EXPECT_EQ(ops::to(h, ScalarType::Float).numel(), n);
  }
}

TEST(CastTest, LargeCopiesAreExactWhateverTheirAlignmentTailAndOverlap) {
  // Past 1 MB a same-dtype copy of contiguous tensors runs in vector loads and stores
  // where the CPU has them: every element, the tail and an unaligned start exact, and
  // tensors that overlap copied as memmove copies.
  const int64_t n = (int64_t{1} << 18) + 37;  // floats: 1 MB and a tail
  std::vector<float> xs(static_cast<size_t>(n + 1));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const Tensor src = from_vector(xs);
  for (int64_t offset : {0, 1}) {  // 1: the source starts 4 bytes past a vector boundary
    const Tensor s = src.slice(0, offset, offset + n);
    Tensor d = empty({n}, ScalarType::Float);
    d.copy_(s);
    EXPECT_EQ(std::memcmp(d.data_ptr<float>(), xs.data() + offset, static_cast<size_t>(n) * sizeof(float)), 0)
        << "offset " << offset;
    Tensor unaligned = empty({n + 1}, ScalarType::Float).slice(0, 1, n + 1);
    unaligned.copy_(s);
    EXPECT_EQ(std::memcmp(unaligned.data_ptr<float>(), xs.data() + offset, static_cast<size_t>(n) * sizeof(float)), 0)
        << "offset " << offset << ", unaligned destination";
  }
  Tensor t = from_vector(xs);
  t.slice(0, 1, n + 1).copy_(t.slice(0, 0, n));  // forward overlap
  EXPECT_EQ(t.data_ptr<float>()[0], xs[0]);
  EXPECT_EQ(std::memcmp(t.data_ptr<float>() + 1, xs.data(), static_cast<size_t>(n) * sizeof(float)), 0);
  Tensor u = from_vector(xs);
  u.slice(0, 0, n).copy_(u.slice(0, 1, n + 1));  // backward overlap
  EXPECT_EQ(std::memcmp(u.data_ptr<float>(), xs.data() + 1, static_cast<size_t>(n) * sizeof(float)), 0);
  EXPECT_EQ(u.data_ptr<float>()[n], xs[static_cast<size_t>(n)]);
}

// Floats to integers: C++ leaves NaN and out-of-range values undefined; Strata gives
// what PyTorch gives on x86-64 (Note [Integer overflow] in core_ops.cc).
TEST(CastTest, FloatsOutOfAnIntegersRangeConvertAsPyTorchOnX86) {
  const double nan = std::nan("");
  const Tensor x = from_vector(std::vector<double>{-2.5, 300.0, nan, 1e300, 7.9, -1e300});
  auto as = [&](ScalarType t) { return x.to(t).to(ScalarType::Long).to_vector<int64_t>(); };
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  const int64_t i32min = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(as(ScalarType::Long), (std::vector<int64_t>{-2, 300, i64min, i64min, 7, i64min}));
  EXPECT_EQ(as(ScalarType::Int), (std::vector<int64_t>{-2, 300, i32min, i32min, 7, i32min}));
  EXPECT_EQ(as(ScalarType::Byte), (std::vector<int64_t>{254, 44, 0, 0, 7, 0}));
  EXPECT_EQ(as(ScalarType::Char), (std::vector<int64_t>{-2, 44, 0, 0, 7, 0}));
  EXPECT_EQ(Scalar(1e300).toLong(), i64min);
  EXPECT_EQ(Scalar(-2.5).to<uint8_t>(), 254);
  // Through float16 too.
  EXPECT_EQ(x.to(ScalarType::Half).to(ScalarType::Long).to_vector<int64_t>()[3], i64min);  // inf in half
}

// Integer tensors wrap on overflow, as PyTorch's do.
TEST(CastTest, IntegerArithmeticWraps) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const Tensor big = full({2}, Scalar(max), TensorOptions(ScalarType::Long));
  EXPECT_EQ(ops::add(big, Scalar(int64_t{1})).to_vector<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ops::mul(big, Scalar(int64_t{3})).to_vector<int64_t>()[0], max - 2);  // 3 * max mod 2^64
  const Tensor i32 = full({1}, Scalar(int64_t{2147483647}), TensorOptions(ScalarType::Int));
  EXPECT_EQ(ops::add(i32, i32).to(ScalarType::Long).to_vector<int64_t>()[0], -2);
}

// Bools are one byte that C++ lets hold only 0 or 1, so bool tensors start False;
// arange's count and contiguous strides never overflow.
TEST(CastTest, BoolTensorsStartFalseAndHugeCountsAreRefused) {
  const Tensor b = empty({64}, TensorOptions(ScalarType::Bool));
  EXPECT_EQ(ops::sum(b.to(ScalarType::Long)).to_vector<int64_t>()[0], 0);
  for (auto f : std::vector<std::function<void()>>{
           [] { arange(Scalar(std::numeric_limits<int64_t>::min()), Scalar(std::numeric_limits<int64_t>::max()),
                       Scalar(int64_t{1})); },
           [] { arange(Scalar(0.0), Scalar(1.0), Scalar(1e-300)); },
           [] { empty({int64_t{1} << 40, int64_t{1} << 40}, TensorOptions(kMeta)); }}) {
    try {
      f();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("more elements than fit in 64 bits"), std::string::npos) << e.what();
    }
  }
}

// arange's values are exact at the ends of int64, where i * step alone overflows.
TEST(CastTest, ArangeIsExactAcrossTheWholeInt64Range) {
  constexpr int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(arange(Scalar(lo), Scalar(hi), Scalar(int64_t{1} << 62)).to_vector<int64_t>(),
              ::testing::ElementsAre(lo, -(int64_t{1} << 62), 0, int64_t{1} << 62));
  EXPECT_THAT(arange(Scalar(hi), Scalar(lo), Scalar(-(int64_t{3} << 61))).to_vector<int64_t>(),
              ::testing::ElementsAre(hi, hi - (int64_t{3} << 61), hi - (int64_t{3} << 61) - (int64_t{3} << 61)));
  // Into a narrower dtype the values wrap, as a cast of each does.
  EXPECT_THAT(arange(Scalar(int64_t{254}), Scalar(int64_t{258}), Scalar(int64_t{1}), TensorOptions(kUInt8))
                  .to_vector<uint8_t>(),
              ::testing::ElementsAre(254, 255, 0, 1));
}

}  // namespace
}  // namespace strata
