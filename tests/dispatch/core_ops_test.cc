// The core:: ops: values on CPU, shapes and dtypes on Meta, PyTorch's promotion
// and error messages, and that they go through the dispatcher.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/strata.h"
#include "test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

using strata::testing::errorOf;

Tensor fv(std::vector<float> v, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape);
}
std::vector<int64_t> shapeOf(const Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }

TEST(CoreOps, AreRegisteredAsBuiltinWithCpuAndMetaKernels) {
  const auto names = Dispatcher::singleton().operatorNames();
  int core = 0;
  for (const auto& n : names) core += n.name.rfind("core::", 0) == 0;
  EXPECT_GE(core, 39);
  const auto regs = Dispatcher::singleton().registrations(parseOperatorName("core::add.Tensor"));
  EXPECT_GE(regs.size(), 3u);  // the def, CPU, Meta (and CUDA when built with it)
  for (const auto& r : regs) {
    EXPECT_EQ(r.owner, "builtin");
  }
  const std::string d = dump("core::sin");
  EXPECT_THAT(d, HasSubstr("CPU                  kernel"));
  EXPECT_THAT(d, HasSubstr("Meta                 kernel"));
}

TEST(CoreOps, FactoriesFollowTorch) {
  EXPECT_TRUE(ops::zeros({2, 3}).equal(zeros({2, 3})));
  EXPECT_TRUE(ops::ones({2}, kInt64).equal(ones({2}, kInt64)));
  EXPECT_EQ(ops::full({2}, 3).dtype(), kInt64);  // dtype from the fill value
  EXPECT_EQ(ops::full({2}, 1.5).dtype(), kFloat32);
  EXPECT_EQ(ops::full({2}, true).dtype(), kBool);
  EXPECT_TRUE(ops::arange(4).equal(from_vector<int64_t>({0, 1, 2, 3})));
  EXPECT_TRUE(ops::arange(1, 2, 0.5).equal(fv({1.0f, 1.5f})));
  // An integer dtype takes the bounds and step as integers, as ATen does.
  EXPECT_THAT(errorOf([] { ops::arange(0, 2.5, 0.5, kInt64); }), HasSubstr("step must be nonzero"));
  EXPECT_TRUE(ops::arange(0.5, 5.5, 1.5, kInt64).equal(from_vector<int64_t>({0, 1, 2, 3, 4})));
  EXPECT_TRUE(ops::arange(0.5, 5.5, 1.5, kInt32).equal(from_vector<int32_t>({0, 1, 2, 3})));
  EXPECT_THAT(errorOf([] { ops::arange(2, kBool); }), HasSubstr("not implemented for 'Bool'"));
  const Tensor m = ops::empty({4, 5}, kFloat16, kMeta);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.dtype(), kFloat16);
  EXPECT_EQ(ops::empty_like(m).dtype(), kFloat16);
  EXPECT_TRUE(ops::empty_like(m, std::nullopt, kCPU).is_cpu());
}

TEST(CoreOps, ArithmeticBroadcastsAndPromotes) {
  const Tensor a = fv({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = fv({10, 20, 30});
  EXPECT_TRUE(ops::add(a, b).equal(fv({11, 22, 33, 14, 25, 36}, {2, 3})));
  EXPECT_TRUE(ops::add(a, b, 2).equal(fv({21, 42, 63, 24, 45, 66}, {2, 3})));
  EXPECT_TRUE(ops::sub(b, 1.0).equal(fv({9, 19, 29})));
  EXPECT_TRUE(ops::mul(a, 2).equal(fv({2, 4, 6, 8, 10, 12}, {2, 3})));
  EXPECT_TRUE(ops::div(b, fv({10})).equal(fv({1, 2, 3})));
  const Tensor i = from_vector<int64_t>({1, 2});
  EXPECT_EQ(ops::add(i, 1).dtype(), kInt64);
  EXPECT_EQ(ops::add(i, 1.5).dtype(), kFloat32);  // a float scalar lifts an int tensor to the default float
  EXPECT_EQ(ops::div(i, i).dtype(), kFloat32);    // true division
  EXPECT_TRUE(ops::div(i, 2).equal(fv({0.5f, 1.0f})));
  EXPECT_EQ(ops::mul(ones({2}, kFloat16), 2.5).dtype(), kFloat16);  // a scalar does not raise the category's width
  EXPECT_EQ(ops::add(ones({2}, kFloat16), ones({2}, kBFloat16)).dtype(), kFloat32);
  EXPECT_EQ(ops::add(ones({2}, kInt32), ones({}, kFloat64)).dtype(), kFloat64);  // higher-category zero-dim
  EXPECT_EQ(ops::add(ones({2}, kFloat32), ones({}, kFloat64)).dtype(), kFloat32);
  EXPECT_EQ(ops::promoteTypes(kUInt8, kInt8), kInt32);
  EXPECT_THAT(errorOf([&] { ops::add(fv({1, 2}), fv({1, 2, 3})); }),
              HasSubstr("The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0"));
  // As ATen's sub_check: one bool operand is enough to refuse, whatever the result type.
  EXPECT_THAT(errorOf([] { ops::sub(ones({1}, kBool), ones({1}, kBool)); }), HasSubstr("two bool tensors is not supported"));
  EXPECT_THAT(errorOf([] { ops::sub(fv({1, 2}), ones({2}, kBool)); }), HasSubstr("with a bool tensor is not supported"));
  EXPECT_THAT(errorOf([] { ops::sub(ones({2}, kBool), 1); }), HasSubstr("with a bool tensor is not supported"));
  EXPECT_THAT(errorOf([] { ops::sub(fv({1, 2}), true); }), HasSubstr("with a bool tensor is not supported"));
  // As ATen's alpha_check: a bool alpha only for a Bool result, an integral one for any.
  EXPECT_THAT(errorOf([&] { ops::add(i, i, 1.5); }), HasSubstr("alpha must not be a floating point"));
  EXPECT_THAT(errorOf([] { ops::add(fv({1, 2}), fv({1, 2}), true); }),
              HasSubstr("boolean alpha only supported for Boolean results"));
  EXPECT_THAT(errorOf([&] { ops::add(i, i, true); }), HasSubstr("boolean alpha only supported for Boolean results"));
  EXPECT_TRUE(ops::add(from_vector<bool>({true, false}), ones({2}, kBool), 2).equal(ones({2}, kBool)));
  EXPECT_TRUE(ops::add(from_vector<bool>({false, false}), ones({2}, kBool), false).equal(zeros({2}, kBool)));
  EXPECT_THAT(errorOf([] { ops::add(ones({1}, kBool), ones({1}, kBool), 0.5); }), HasSubstr("alpha must not be a floating point"));
  EXPECT_TRUE(ops::add(ones({2}, kBool), zeros({2}, kBool)).equal(ones({2}, kBool)));  // logical or
  // float16 / bfloat16 on CPU as ATen: alpha becomes the result's type, and alpha * b is
  // rounded before the sum (both give 2048, 256 there; one rounding would give 2050, 258).
  EXPECT_EQ(ops::add(full({1}, 2048.0, kFloat16), 1.0, 1.0004).item().toDouble(), 2048.0);
  EXPECT_EQ(ops::add(full({1}, 256.0, kBFloat16), ones({1}, kBFloat16), 1.003).item().toDouble(), 256.0);
  EXPECT_EQ(ops::sub(full({1}, 3.0, kFloat16), ones({1}, kFloat16), 0.5).item().toDouble(), 2.5);
}

TEST(CoreOps, UnaryOps) {
  const Tensor x = fv({0.0f, 1.0f});
  EXPECT_TRUE(ops::neg(x).equal(fv({-0.0f, -1.0f})));
  EXPECT_TRUE(ops::allclose(ops::sin(x), fv({0.0f, std::sin(1.0f)})));
  EXPECT_TRUE(ops::allclose(ops::cos(x), fv({1.0f, std::cos(1.0f)})));
  EXPECT_TRUE(ops::allclose(ops::exp(x), fv({1.0f, std::exp(1.0f)})));
  EXPECT_EQ(ops::sin(from_vector<int64_t>({1})).dtype(), kFloat32);
  EXPECT_EQ(ops::exp(ones({2}, kFloat16)).dtype(), kFloat16);
  EXPECT_THAT(errorOf([] { ops::neg(ones({1}, kBool)); }), HasSubstr("on a bool tensor is not supported"));
}

TEST(CoreOps, SumAllAndOverDims) {
  const Tensor a = fv({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::sum(a).item().toDouble(), 21);
  EXPECT_EQ(ops::sum(a).dim(), 0);
  EXPECT_TRUE(ops::sum(a, std::vector<int64_t>{0}).equal(fv({5, 7, 9})));
  EXPECT_TRUE(ops::sum(a, std::vector<int64_t>{-1}, true).equal(fv({6, 15}, {2, 1})));
  EXPECT_EQ(ops::sum(ones({3}, kBool)).dtype(), kInt64);
  EXPECT_EQ(ops::sum(ones({3}, kBool)).item().toLong(), 3);
  EXPECT_EQ(ops::sum(a, std::nullopt, false, kFloat64).dtype(), kFloat64);
  EXPECT_THAT(errorOf([&] { ops::sum(a, std::vector<int64_t>{0, 0}); }), HasSubstr("appears multiple times"));
  EXPECT_THAT(errorOf([&] { ops::sum(a, std::vector<int64_t>{2}); }), HasSubstr("out of range"));
  // A 0-d tensor's dims are 0 and -1, the same one: both is a repeat, 1 is out of range.
  const Tensor z = full({}, 2.0);
  EXPECT_EQ(ops::sum(z, std::vector<int64_t>{0}).item().toDouble(), 2);
  EXPECT_THAT(errorOf([&] { ops::sum(z, std::vector<int64_t>{0, -1}); }), HasSubstr("appears multiple times"));
  EXPECT_THAT(errorOf([&] { ops::sum(z, std::vector<int64_t>{1}); }), HasSubstr("out of range"));
  // As torch.sum(dtype=): the input is cast first, so 1.5 + 2.5 as int64 is 1 + 2, and
  // 70000 - 70000 as float16 is inf - inf.
  EXPECT_EQ(ops::sum(fv({1.5f, 2.5f}), kInt64).item().toLong(), 3);
  EXPECT_TRUE(std::isnan(ops::sum(fv({70000.0f, -70000.0f}), kFloat16).item().toDouble()));
  EXPECT_EQ(ops::sum(fv({0.5f, 0.25f}), std::vector<int64_t>{0}, false, kFloat64).item().toDouble(), 0.75);
}

TEST(CoreOps, MatmulCoversVectorsMatricesAndBatches) {
  const Tensor m = fv({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor v = fv({1, 1, 1});
  EXPECT_TRUE(ops::matmul(m, v).equal(fv({6, 15})));
  EXPECT_EQ(ops::matmul(v, v).item().toDouble(), 3);
  EXPECT_TRUE(ops::matmul(fv({1, 1}), m).equal(fv({5, 7, 9})));
  EXPECT_TRUE(ops::matmul(m, ops::t(m)).equal(fv({14, 32, 32, 77}, {2, 2})));
  const Tensor batch = ops::stack({m, m, m});
  EXPECT_EQ(shapeOf(ops::matmul(batch, ops::t(m))), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_THAT(errorOf([&] { ops::matmul(m, m); }), HasSubstr("shapes cannot be multiplied ([2, 3] and [2, 3])"));
  EXPECT_THAT(errorOf([&] { ops::matmul(m, ones({3}, kFloat64)); }), HasSubstr("same dtype"));
}

TEST(CoreOps, ViewsShareStorage) {
  const Tensor a = fv({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor t = ops::t(a);
  EXPECT_EQ(shapeOf(t), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(t.is_alias_of(a));
  EXPECT_TRUE(ops::transpose(a, 0, 1).equal(t));
  EXPECT_EQ(shapeOf(ops::movedim(ones({2, 3, 4}), 0, -1)), (std::vector<int64_t>{3, 4, 2}));
  EXPECT_EQ(shapeOf(ops::unsqueeze(a, 1)), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(shapeOf(ops::squeeze(ones({1, 2, 1}))), (std::vector<int64_t>{2}));
  EXPECT_EQ(shapeOf(ops::squeeze(ones({1, 2, 1}), 0)), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(shapeOf(ops::squeeze(ones({1, 2, 1}), 1)), (std::vector<int64_t>{1, 2, 1}));
  EXPECT_TRUE(ops::select(a, 1, 2).equal(fv({3, 6})));
  const Tensor e = ops::expand(fv({1, 2, 3}), {2, -1});
  EXPECT_TRUE(e.equal(fv({1, 2, 3, 1, 2, 3}, {2, 3})));
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_THAT(errorOf([] { ops::expand(fv({1, 2, 3}), {2, 4}); }),
              HasSubstr("must match the existing size (3) at non-singleton dimension 1"));
  EXPECT_TRUE(ops::view(a, {3, 2}).is_alias_of(a));
  EXPECT_TRUE(ops::reshape(t, {6}).equal(fv({1, 4, 2, 5, 3, 6})));
  EXPECT_TRUE(ops::contiguous(t).is_contiguous());
  EXPECT_THAT(errorOf([] { ops::t(ones({1, 1, 1})); }), HasSubstr("<= 2 dimensions"));
}

TEST(CoreOps, StackAndCat) {
  const Tensor a = fv({1, 2});
  const Tensor b = fv({3, 4});
  EXPECT_TRUE(ops::cat({a, b}).equal(fv({1, 2, 3, 4})));
  EXPECT_TRUE(ops::stack({a, b}).equal(fv({1, 2, 3, 4}, {2, 2})));
  EXPECT_TRUE(ops::stack({a, b}, 1).equal(fv({1, 3, 2, 4}, {2, 2})));
  EXPECT_EQ(ops::cat({a, from_vector<int64_t>({5})}).dtype(), kFloat32);
  EXPECT_THAT(errorOf([&] { ops::stack({a, fv({1})}); }), HasSubstr("equal size"));
  // An empty list carries no keys: like any op with no tensors, it needs a composite kernel.
  EXPECT_THAT(errorOf([] { ops::cat({}); }), HasSubstr("core::cat: no kernel for a call with an empty key set: the call has "
                                                     "no tensor arguments (e.g. an empty list of tensors: this "
                                                     "operator needs a non-empty one)"));
  EXPECT_THAT(errorOf([] { ops::cat({ones({2, 2}), ones({2, 3})}); }), HasSubstr("except in dimension 0"));
  // The legacy empty tensor (1-d, size 0) is skipped whatever the others' shapes, and
  // still takes part in the dtype, as ATen's cat does.
  const Tensor skipped = ops::cat({ones({2, 3}), zeros({0}, kFloat64), ones({1, 3})});
  EXPECT_EQ(skipped.sizes()[0], 3);
  EXPECT_EQ(skipped.sizes()[1], 3);
  EXPECT_EQ(skipped.dtype(), kFloat64);
  EXPECT_EQ(ops::cat({zeros({0}), zeros({0})}).numel(), 0);
  // Every input skipped: an empty 1-d result of the promoted dtype, whatever dim says.
  for (int64_t dim : {1, -2, 5}) {
    const Tensor none = ops::cat({zeros({0}), zeros({0}, kInt64), zeros({0}, kFloat64)}, dim);
    EXPECT_EQ(shapeOf(none), (std::vector<int64_t>{0}));
    EXPECT_EQ(none.dtype(), kFloat64);
  }
  EXPECT_THAT(errorOf([] { ops::cat({zeros({0}), empty({0}, kMeta)}, 1); }),
              HasSubstr("core::cat: expected all tensors to be on the same device, but found cpu and meta"));
  EXPECT_THAT(errorOf([] { ops::cat({ones({2}), full({}, 1.0)}); }), HasSubstr("zero-dimensional tensor (at position 1)"));
}

TEST(CoreOps, CopiesAndCasts) {
  Tensor dst = zeros({2, 2});
  ops::copy_(dst, fv({1, 2}));  // broadcast into the destination
  EXPECT_TRUE(dst.equal(fv({1, 2, 1, 2}, {2, 2})));
  const Tensor h = ops::to(dst, kFloat16);
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_TRUE(ops::to(dst, kFloat32).is_alias_of(dst));
  EXPECT_FALSE(ops::to(dst, kFloat32, false, true).is_alias_of(dst));
  const Tensor c = ops::clone(dst);
  EXPECT_FALSE(c.is_alias_of(dst));
  EXPECT_TRUE(c.equal(dst));
}

TEST(CoreOps, Allclose) {
  EXPECT_TRUE(ops::allclose(fv({1.0f}), fv({1.0f + 1e-7f})));
  EXPECT_FALSE(ops::allclose(fv({1.0f}), fv({1.1f})));
  const float nan = std::nanf("");
  EXPECT_FALSE(ops::allclose(fv({nan}), fv({nan})));
  EXPECT_TRUE(ops::allclose(fv({nan}), fv({nan}), 1e-5, 1e-8, true));
  // A difference that is infinite in the dtype is never close, as torch.isclose.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(ops::allclose(fv({inf, -inf}), fv({inf, -inf})));
  EXPECT_FALSE(ops::allclose(fv({inf}), fv({-inf})));
  EXPECT_FALSE(ops::allclose(fv({1.0f}), fv({inf})));
  EXPECT_FALSE(ops::allclose(fv({3e38f}), fv({-3e38f}), 2.0, 0.0));  // |a - b| is inf in float32
  EXPECT_TRUE(ops::allclose(from_vector<double>({3e38}), from_vector<double>({-3e38}), 2.0, 0.0));  // not in float64
  EXPECT_FALSE(ops::allclose(fv({60000}).to(kFloat16), fv({-60000}).to(kFloat16), 0.0, inf));
  EXPECT_TRUE(ops::allclose(fv({1000}).to(kFloat16), fv({1001}).to(kFloat16), 1e-3, 0.0));
  // Each step rounded to the dtype: |1 - 1.0009765625| is within 9.756e-4 * 1.0009765625
  // only once the product is rounded to float16.
  EXPECT_TRUE(ops::allclose(fv({1}).to(kFloat16), fv({1.0009765625f}).to(kFloat16), 9.756e-4, 0.0));
  // Integers: equal exactly, or within the tolerances in float32, as torch.isclose
  // (whose float32 difference of 2^24 + 1 and 2^24 is 0).
  EXPECT_TRUE(ops::allclose(from_vector<int64_t>({5}), from_vector<int64_t>({6}), 0.0, 1.0));
  EXPECT_TRUE(ops::allclose(from_vector<int32_t>({16777217}), from_vector<int32_t>({16777216}), 0.0, 0.5));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_FALSE(ops::allclose(from_vector<int64_t>({kMax}), from_vector<int64_t>({kMax - 1}), 0.0, 0.0));
  EXPECT_TRUE(ops::allclose(from_vector<int64_t>({kMax}), from_vector<int64_t>({kMax}), 0.0, 0.0));
  EXPECT_THAT(errorOf([] { ops::allclose(empty({1}, kMeta), empty({1}, kMeta)); }), HasSubstr("meta tensors have none"));
  // As torch.isclose: one dtype, tolerances not negative.
  EXPECT_THAT(errorOf([] { ops::allclose(from_vector<int64_t>({1}), fv({1})); }), HasSubstr("int64 did not match float32"));
  EXPECT_THAT(errorOf([] { ops::allclose(fv({1}), fv({1}), -1.0); }), HasSubstr("rtol must be greater than or equal to zero"));
  EXPECT_THAT(errorOf([] { ops::allclose(fv({1}), fv({1}), 1e-5, -1.0); }), HasSubstr("atol must be greater than or equal to zero"));
}

// As PyTorch's CPU kernels: no bool matmul (a meta call gives the shape), and no
// copy_ into a tensor whose elements share memory (expand's stride 0).
TEST(CoreOps, BoolMatmulAndCopyIntoAnExpandedTensorAreRefused) {
  const Tensor t = from_vector<int64_t>({0, 1, 0}).to(kBool);
  EXPECT_THAT(errorOf([&] { ops::matmul(t, t); }), HasSubstr("\"core::matmul\" not implemented for 'Bool' (as PyTorch's \"dot\")"));
  EXPECT_THAT(errorOf([&] { ops::matmul(t.view({1, 3}), t.view({3, 1})); }), HasSubstr("addmm_impl_cpu_"));
  EXPECT_THAT(errorOf([&] { ops::matmul(t.view({1, 1, 3}), t); }), HasSubstr("addmv_impl_cpu"));
  EXPECT_THAT(errorOf([&] { ops::matmul(t.view({1, 1, 3}), t.view({1, 3, 1})); }), HasSubstr("\"bmm\""));
  // No product to compute: PyTorch gives the (empty or false) result, but not for dot.
  const auto bools = [](std::vector<int64_t> s) { return ops::zeros(s, kBool); };
  EXPECT_EQ(shapeOf(ops::matmul(bools({2, 0}), bools({0, 2}))), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ops::matmul(bools({2, 0}), bools({0, 2})).to_vector<bool>(), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(shapeOf(ops::matmul(bools({0, 3}), bools({3, 2}))), (std::vector<int64_t>{0, 2}));
  EXPECT_THAT(errorOf([&] { ops::matmul(bools({0}), bools({0})); }), HasSubstr("\"dot\""));
  EXPECT_EQ(shapeOf(ops::matmul(empty({2, 3}, TensorOptions(kBool).with_device(kMeta)),
                                empty({3}, TensorOptions(kBool).with_device(kMeta)))),
            (std::vector<int64_t>{2}));
  const Tensor one = fv({1.0f});
  const Tensor expanded = one.as_strided({3}, {0});  // what expand(3) makes
  EXPECT_THAT(errorOf([&] { expanded.copy_(fv({1, 2, 3})); }),
              HasSubstr("more than one element of the written-to tensor (sizes [3], strides [0]) refers to a single "
                        "memory location"));
  Tensor e = expanded;
  EXPECT_THAT(errorOf([&] { ops::copy_(e, fv({1, 2, 3})); }), HasSubstr("Please clone() the tensor"));
  EXPECT_EQ(one._version(), 0u);  // refused before it counted a write
  expanded.fill_(5.0);  // one value into every element: allowed, as in PyTorch
  EXPECT_EQ(one.to_vector<float>(), (std::vector<float>{5}));
  one.as_strided({1}, {0}).copy_(fv({7}));  // a stride 0 over one element shares nothing
  EXPECT_EQ(one.to_vector<float>(), (std::vector<float>{7}));
  // A tensor copied into itself: PyTorch returns at once (the write is still counted).
  const uint32_t v = one._version();
  expanded.copy_(expanded);
  EXPECT_NO_THROW(ops::copy_(e, e));
  EXPECT_EQ(one._version(), v + 2);
}

// alpha is converted to the result dtype with the fill value's check (sub's negated
// first), as ATen's add/sub convert it: a value the dtype cannot hold is an error.
TEST(CoreOps, AlphaMustFitTheResultDtype) {
  const Tensor u = from_vector<int64_t>({3, 1}).to(kUInt8);
  EXPECT_THAT(errorOf([&] { ops::add(u, u, 300); }),
              HasSubstr("core::add: alpha 300 cannot be converted to uint8 without overflow"));
  const Tensor i8 = from_vector<int64_t>({3, 1}).to(kInt8);
  EXPECT_THAT(errorOf([&] { ops::sub(i8, 1, -255); }),
              HasSubstr("core::sub: alpha, negated, 255 cannot be converted to int8 without overflow"));
  EXPECT_EQ(ops::sub(i8, 1, 128).to_vector<int8_t>(), (std::vector<int8_t>{-125, -127}));  // -128 fits
  EXPECT_THAT(errorOf([&] { ops::add(fv({1}).to(kFloat16), fv({1}).to(kFloat16), 70000.0); }),
              HasSubstr("alpha 70000.0 cannot be converted to float16"));
  EXPECT_THAT(errorOf([&] { ops::add(fv({1}), fv({1}), 1e39); }), HasSubstr("float32 without overflow"));
  EXPECT_EQ(ops::add(u, u, -1).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0}));  // -1 wraps in uint8
  EXPECT_TRUE(std::isinf(ops::add(fv({1}), fv({1}), std::numeric_limits<double>::infinity()).item().toDouble()));
  // A meta call converts nothing, as ATen's meta add.
  EXPECT_NO_THROW(ops::add(empty({2}, TensorOptions(kUInt8).with_device(kMeta)),
                           empty({2}, TensorOptions(kUInt8).with_device(kMeta)), 300));
}

TEST(CoreOps, MetaKernelsGiveShapesAndDtypesWithoutData) {
  const Tensor a = empty({2, 3}, kMeta);
  const Tensor b = empty({3}, TensorOptions(kFloat64).with_device(kMeta));
  const Tensor s = ops::add(a, b);
  EXPECT_TRUE(s.is_meta());
  EXPECT_EQ(shapeOf(s), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s.dtype(), kFloat64);
  EXPECT_EQ(shapeOf(ops::matmul(a, empty({3, 4}, kMeta))), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(shapeOf(ops::sum(a, std::vector<int64_t>{1}, true)), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(shapeOf(ops::cat({a, a}, 1)), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(shapeOf(ops::stack({a, a})), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(ops::sin(empty({2}, TensorOptions(kInt64).with_device(kMeta))).dtype(), kFloat32);
  EXPECT_TRUE(ops::t(a).is_meta());
  EXPECT_THAT(errorOf([&] { ops::matmul(a, a); }), HasSubstr("cannot be multiplied"));
}

TEST(CoreOps, CallableBoxedWithDefaults) {
  const auto h = Dispatcher::singleton().findSchemaOrThrow("core::sum.dim_IntList");
  Stack s{fv({1, 2, 3, 4}, {2, 2}), int64_t{1}};  // int[1]? given a single int
  h.callBoxed(s);
  EXPECT_TRUE(s.at(0).toTensor().equal(fv({3, 7})));
  Stack f{std::vector<int64_t>{2}, IValue(), IValue("meta")};  // Device from a string
  Dispatcher::singleton().findSchemaOrThrow("core::zeros").callBoxed(f);
  EXPECT_TRUE(f.at(0).toTensor().is_meta());
}

// Matrices take a direct path; other layouts the general one. Both accumulate in
// float32 (float64 for float64), so the same matrices give the same bits.
TEST(CoreOpsTest, MatmulGivesTheSameBitsWhateverTheLayout) {
  std::vector<float> av(6 * 5), bv(5 * 4);
  for (size_t i = 0; i < av.size(); ++i) av[i] = 0.1f * static_cast<float>(i) - 1.3f;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.7f - 0.03f * static_cast<float>(i * i % 17);
  for (ScalarType dt : {ScalarType::Float, ScalarType::BFloat16, ScalarType::Half, ScalarType::Double}) {
    const Tensor a = from_vector(av, std::vector<int64_t>{6, 5}).to(dt);
    const Tensor b = from_vector(bv, std::vector<int64_t>{5, 4}).to(dt);
    const Tensor direct = ops::matmul(a, b);
    const Tensor strided = ops::matmul(ops::t(ops::contiguous(ops::t(a))), b);  // a non-contiguous copy of a
    ASSERT_FALSE(ops::t(ops::contiguous(ops::t(a))).is_contiguous());
    const Tensor batched = ops::select(ops::matmul(ops::unsqueeze(a, 0), b), 0, 0);
    EXPECT_EQ(direct.dtype(), dt);
    EXPECT_TRUE(direct.equal(strided)) << toString(dt);
    EXPECT_TRUE(direct.equal(batched)) << toString(dt);
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(CoreOps, NarrowIsAViewAndNamesItsBounds) {
  const Tensor x = ops::arange(12, ScalarType::Float).reshape({3, 4});
  const Tensor n = ops::narrow(x, 1, 1, 2);
  EXPECT_EQ(shapeOf(n), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(n.is_alias_of(x));
  EXPECT_EQ(n.contiguous().to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(ops::narrow(x, 0, -1, 1).contiguous().to_vector<float>(), (std::vector<float>{8, 9, 10, 11}));
  EXPECT_THAT(errorOf([&] { ops::narrow(x, 1, 3, 2); }),
              HasSubstr("core::narrow: start (3) + length (2) exceeds dimension size (4)"));
  EXPECT_THAT(errorOf([&] { ops::narrow(x, 0, 5, 0); }),
              HasSubstr("core::narrow: start (5) is out of bounds for dimension 0 of size 3"));
  EXPECT_THAT(errorOf([&] { ops::narrow(ops::ones({}), 0, 0, 1); }), HasSubstr("cannot be applied to a 0-dim"));
}

TEST(CoreOps, RandIsUniformSeededAndRestorable) {
  ops::manual_seed(7);
  const Tensor a = ops::rand({1000});
  ops::manual_seed(7);
  EXPECT_TRUE(ops::rand({1000}).equal(a));  // the seed decides the draw
  const std::vector<float> v = a.to_vector<float>();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0f);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0f);
  const Tensor h = ops::rand({4, 4}, ScalarType::BFloat16);
  EXPECT_EQ(h.dtype(), ScalarType::BFloat16);
  EXPECT_LT(ops::sum(ops::to(h, ScalarType::Float)).item().to<double>(), 16.0);  // no element rounds up to 1
  EXPECT_EQ(ops::rand_like(h).dtype(), ScalarType::BFloat16);
  EXPECT_EQ(shapeOf(ops::rand({2, 3}, std::nullopt, Device(DeviceType::Meta))), (std::vector<int64_t>{2, 3}));
  // get/set_rng_state replays a draw.
  const std::string state = ops::get_rng_state();
  const Tensor first = ops::rand({8});
  ops::set_rng_state(state);
  EXPECT_TRUE(ops::rand({8}).equal(first));
  EXPECT_THAT(errorOf([] { ops::set_rng_state("not a state"); }),
              HasSubstr("set_rng_state: not a state get_rng_state() returned"));
  EXPECT_THAT(errorOf([] { ops::rand({2}, ScalarType::Long); }),
              HasSubstr("core::rand: \"check_uniform_bounds\" is implemented for floating dtypes only, got int64"));
}

}  // namespace
}  // namespace strata
