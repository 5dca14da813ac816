// Tensors: factories, metadata, views, copies, meta tensors, key sets, errors.
#include "strata/tensor.h"
#include "strata/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <thread>

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// EXPECT_THROW plus a check of the message.
#define EXPECT_ERROR(stmt, kind_, substr)                          \
  do {                                                             \
    try {                                                          \
      stmt;                                                        \
      ADD_FAILURE() << "expected strata::Error from " #stmt;       \
    } catch (const Error& e) {                                     \
      EXPECT_EQ(e.kind(), ErrorKind::kind_) << e.what();           \
      EXPECT_THAT(e.what(), HasSubstr(substr));                    \
    }                                                              \
  } while (0)

TEST(TensorTest, FactoriesSetSizesStridesAndValues) {
  const Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_THAT(std::vector<int64_t>(z.sizes().begin(), z.sizes().end()), ElementsAre(2, 3));
  EXPECT_THAT(std::vector<int64_t>(z.strides().begin(), z.strides().end()), ElementsAre(3, 1));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_THAT(z.to_vector<float>(), ElementsAre(0, 0, 0, 0, 0, 0));
  EXPECT_THAT(ones({3}, kInt64).to_vector<int64_t>(), ElementsAre(1, 1, 1));
  EXPECT_THAT(full({2}, 2.5, kFloat64).to_vector<double>(), ElementsAre(2.5, 2.5));
  EXPECT_THAT(full({2}, true, kBool).to_vector<bool>(), ElementsAre(true, true));
  EXPECT_EQ(empty({4}, kUInt8).nbytes(), 4u);
  EXPECT_EQ(empty({0, 5}).numel(), 0);
  EXPECT_EQ(empty({}).numel(), 1);  // a 0-d tensor holds one element
}

TEST(TensorTest, ArangeInfersDtypeLikeTorch) {
  const Tensor i = arange(5);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_THAT(i.to_vector<int64_t>(), ElementsAre(0, 1, 2, 3, 4));
  const Tensor f = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_THAT(f.to_vector<float>(), ElementsAre(0.0f, 0.25f, 0.5f, 0.75f));
  EXPECT_THAT(arange(5, 0, -2).to_vector<int64_t>(), ElementsAre(5, 3, 1));
  EXPECT_THAT(arange(3, TensorOptions(kFloat64)).to_vector<double>(), ElementsAre(0, 1, 2));
  EXPECT_ERROR(arange(0, 5, 0), Value, "step must be nonzero");
  EXPECT_ERROR(arange(5, 0, 1), Value, "inconsistent with step sign");
}

TEST(TensorTest, FromVectorCopiesAndShapes) {
  std::vector<int32_t> v{1, 2, 3, 4, 5, 6};
  const Tensor t = from_vector(v, std::vector<int64_t>{2, 3});
  v[0] = 100;  // a copy: the tensor does not see this
  EXPECT_EQ(t.dtype(), kInt32);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.data_ptr<int32_t>()[0], 1);
  EXPECT_THAT(from_vector<bool>({true, false}).to_vector<bool>(), ElementsAre(true, false));
  EXPECT_ERROR(from_vector<float>({1, 2, 3}, std::vector<int64_t>{2, 2}), Value, "hold 4 elements but 3 values");
}

TEST(TensorTest, TypedDataPtrChecksTheDtype) {
  const Tensor t = zeros({2}, kFloat32);
  EXPECT_NE(t.data_ptr<float>(), nullptr);
  EXPECT_ERROR(t.data_ptr<double>(), Type, "data_ptr<float64>() called on a tensor of dtype float32");
  EXPECT_ERROR(t.data_ptr<int64_t>(), Type, "int64");
}

TEST(TensorTest, NegativeSizesAndBadDimsAreErrors) {
  EXPECT_ERROR(empty({2, -1}), Value, "negative size -1");
  const Tensor t = zeros({2, 3});
  EXPECT_ERROR(t.size(2), Index, "dimension out of range (expected to be in range of [-2, 1], but got 2)");
  EXPECT_ERROR(t.select(0, 5), Index, "index 5 out of range");
  EXPECT_ERROR(t.view({4}), Value, "shape [4] is invalid for input of size 6");
  EXPECT_ERROR(t.view({-1, -1}), Value, "only one dimension can be inferred");
  EXPECT_ERROR(t.permute({0, 0}), Value, "repeats");
  EXPECT_ERROR(t.as_strided({10}, {1}), Value, "need 40 bytes but the storage has 24");
  EXPECT_ERROR(t.as_strided({2}, {-1}), Value, "negative stride");
}

TEST(TensorTest, UndefinedTensorIsAnErrorNotACrash) {
  const Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_ERROR(u.sizes(), Value, "undefined");
  EXPECT_ERROR(u.data_ptr(), Value, "undefined");
  EXPECT_EQ(u.str(), "tensor(undefined)");
}

TEST(TensorTest, ViewsShareStorage) {
  const Tensor a = arange(6, kFloat32).view({2, 3});
  const Tensor t = a.transpose(0, 1);
  EXPECT_TRUE(t.is_alias_of(a));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_THAT(std::vector<int64_t>(t.strides().begin(), t.strides().end()), ElementsAre(1, 3));
  EXPECT_THAT(t.contiguous().to_vector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_FALSE(t.contiguous().is_alias_of(a));

  const Tensor row = a.select(0, 1);
  EXPECT_EQ(row.storage_offset(), 3);
  row.fill_(7);  // writes through the view
  EXPECT_THAT(a.to_vector<float>(), ElementsAre(0, 1, 2, 7, 7, 7));

  const Tensor s = arange(10).slice(0, 1, 8, 3);
  EXPECT_THAT(s.to_vector<int64_t>(), ElementsAre(1, 4, 7));
  EXPECT_THAT(arange(10).slice(0, -3, 100).to_vector<int64_t>(), ElementsAre(7, 8, 9));
  EXPECT_EQ(arange(10).slice(0, 5, 2).numel(), 0);
  const Tensor u = a.unsqueeze(1);
  EXPECT_THAT(std::vector<int64_t>(u.sizes().begin(), u.sizes().end()), ElementsAre(2, 1, 3));
  EXPECT_EQ(u.stride(1), 3);
  EXPECT_ERROR(a.transpose(0, 1).view({6}), Value, "use reshape() instead");
  EXPECT_THAT(a.transpose(0, 1).reshape({6}).to_vector<float>(), ElementsAre(0, 7, 1, 7, 2, 7));
  // A 0-d tensor's dims are 0 and -1, as in torch: its transpose checks them too.
  EXPECT_EQ(full({}, 1.0).transpose(0, -1).dim(), 0);
  EXPECT_ERROR(full({}, 1.0).transpose(3, 5), Index, "dimension out of range (expected to be in range of [-1, 0], but got 3)");
}

// view() and reshape() as ATen's: a non-contiguous tensor is viewable when each run
// of dims laid out contiguously is split or merged on its own (computeStride); the
// strides below are what PyTorch gives for the same calls.
TEST(TensorTest, ViewSplitsAndMergesContiguousRunsOfANonContiguousTensor) {
  auto sizes = [](const Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); };
  auto strides = [](const Tensor& t) { return std::vector<int64_t>(t.strides().begin(), t.strides().end()); };
  const Tensor a = arange(6, kFloat32).view({2, 3});
  const Tensor t = a.transpose(0, 1);  // sizes [3, 2], strides [1, 3]
  const Tensor v = t.view({3, 2});
  EXPECT_TRUE(v.is_alias_of(a));
  EXPECT_THAT(strides(v), ElementsAre(1, 3));
  const Tensor ones_added = t.view({3, 1, 2, 1});
  EXPECT_THAT(strides(ones_added), ElementsAre(1, 6, 3, 3));
  // A narrowed matrix: each row is a contiguous run of 3; the rows split into [2, 2].
  const Tensor n = arange(24, kFloat32).view({4, 6}).slice(1, 0, 3);
  const Tensor nv = n.view({2, 2, 3});
  EXPECT_THAT(strides(nv), ElementsAre(12, 6, 1));
  EXPECT_THAT(nv.contiguous().to_vector<float>(), ElementsAre(0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20));
  EXPECT_ERROR(n.view({12}), Value, "is not compatible with the tensor's sizes [4, 3] and strides [6, 1]");
  // An expanded tensor: the stride-0 dim splits into stride-0 dims.
  const Tensor e = ones({3, 1}).as_strided({3, 4}, {1, 0});
  const Tensor ev = e.view({3, 2, 2});
  EXPECT_THAT(strides(ev), ElementsAre(1, 0, 0));
  EXPECT_ERROR(e.view({12}), Value, "use reshape() instead");
  // Merging across the transpose is what no view can do.
  EXPECT_ERROR(t.view({6}), Value, "spans across two contiguous subspaces");
  // An empty tensor takes any sizes with a 0 among them, strides as a contiguous
  // tensor's (sizes 0 and 1 counted as 1), unless those strides pass 64 bits.
  const Tensor none = empty({2, 0});
  EXPECT_THAT(strides(none.view({0, 3, 4})), ElementsAre(12, 4, 1));
  EXPECT_THAT(strides(none.view({int64_t{1} << 61, 2, 0})), ElementsAre(2, 1, 1));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_ERROR(none.view({0, 7, kMax}), Value,
               "view size [0, 7, 9223372036854775807] of an empty tensor: its strides overflow 64 bits");
  EXPECT_ERROR(none.reshape({0, 7, kMax}), Value, "its strides overflow 64 bits");
  // reshape is that view when there is one, else a copy.
  EXPECT_TRUE(t.reshape({3, 2}).is_alias_of(a));
  EXPECT_TRUE(n.reshape({2, 2, 3}).is_alias_of(n));
  EXPECT_TRUE(e.reshape({3, 2, 2}).is_alias_of(e));
  const Tensor flat = t.reshape({6});
  EXPECT_FALSE(flat.is_alias_of(a));
  EXPECT_THAT(flat.to_vector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(sizes(t.reshape({-1, 1})), ElementsAre(6, 1));
  // Empty tensors and 0-dim ones.
  const Tensor z = empty({0, 3}).transpose(0, 1);
  EXPECT_THAT(strides(z.view({3, 0})), ElementsAre(1, 3));
  EXPECT_THAT(strides(z.view({0, 3, 1})), ElementsAre(3, 1, 1));
  EXPECT_THAT(sizes(full({}, 2.0).view({1, 1})), ElementsAre(1, 1));
}

TEST(TensorTest, CopyConvertsDtypesAndHonoursStrides) {
  const Tensor src = arange(6, kInt64).view({2, 3}).transpose(0, 1);
  const Tensor dst = empty({3, 2}, kFloat64);
  dst.copy_(src);
  EXPECT_THAT(dst.to_vector<double>(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(from_vector<float>({0.0f, 2.5f, -1.0f}).to(kBool).to_vector<bool>(), ElementsAre(false, true, true));
  EXPECT_THAT(from_vector<float>({2.7f, -2.7f}).to(kInt32).to_vector<int32_t>(), ElementsAre(2, -2));
  EXPECT_ERROR(empty({2}).copy_(empty({3})), Value, "destination sizes [2] differ from source sizes [3]");
  const Tensor same = zeros({2});
  EXPECT_EQ(same.to(kFloat32).unsafeGetTensorImpl(), same.unsafeGetTensorImpl());  // no-op conversion
  EXPECT_NE(same.clone().unsafeGetTensorImpl(), same.unsafeGetTensorImpl());
}

// As in PyTorch: a tensor an op or a factory makes reads version 0 (filling it is
// not a write anyone could have saved a value across); copy_ and fill_ on it bump.
TEST(TensorTest, NewTensorsStartAtVersionZero) {
  const Tensor a = arange(6, kFloat32).view({2, 3});
  EXPECT_EQ(full({2, 2}, 1.5)._version(), 0u);
  EXPECT_EQ(ones({3})._version(), 0u);
  EXPECT_EQ(zeros({3})._version(), 0u);
  EXPECT_EQ(a.clone()._version(), 0u);
  EXPECT_EQ(a.to(kFloat64)._version(), 0u);
  EXPECT_EQ(a.transpose(0, 1).contiguous()._version(), 0u);
  EXPECT_EQ(ops::clone(a)._version(), 0u);
  EXPECT_EQ(ops::to(a, kFloat16)._version(), 0u);
  EXPECT_EQ(ops::cat({a, a, a}, 0)._version(), 0u);
  EXPECT_EQ(ops::stack({a, a}, 1)._version(), 0u);
  const Tensor c = a.clone();
  c.copy_(a);
  EXPECT_EQ(c._version(), 1u);
  c.fill_(2.0);
  EXPECT_EQ(c._version(), 2u);
  c.slice(1, 0, 2).zero_();  // a view shares its base's counter
  EXPECT_EQ(c._version(), 3u);
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(0, 0, 2, 0, 0, 2));
  // A write to no elements is still a write: PyTorch's counter moves for it too.
  const Tensor e = zeros({0, 3});
  e.fill_(1.0);
  EXPECT_EQ(e._version(), 1u);
  e.zero_();
  EXPECT_EQ(e._version(), 2u);
  e.copy_(zeros({0, 3}));
  EXPECT_EQ(e._version(), 3u);
}

// Note [A fill value must fit the dtype]: fill_ and full refuse a value the dtype
// cannot hold, with c10::checked_convert's ranges, and write nothing; a number given
// to a binary op wraps as PyTorch's does.
TEST(TensorTest, FillValuesMustFitTheDtype) {
  EXPECT_ERROR(full({2}, 300, kUInt8), Value, "full: value 300 cannot be converted to uint8 without overflow");
  EXPECT_ERROR(full({2}, -256, kUInt8), Value, "value -256 cannot be converted to uint8");
  EXPECT_THAT(full({2}, -1, kUInt8).to_vector<uint8_t>(), ElementsAre(255, 255));  // wraps, as in PyTorch
  EXPECT_THAT(full({1}, -255, kUInt8).to_vector<uint8_t>(), ElementsAre(1));
  EXPECT_ERROR(full({1}, -1.0, kUInt8), Value, "value -1.0 cannot be converted to uint8");  // a float may not wrap
  EXPECT_ERROR(full({1}, 255.5, kUInt8), Value, "value 255.5 cannot be converted to uint8");  // checked before truncating
  EXPECT_THAT(full({1}, 255.0, kUInt8).to_vector<uint8_t>(), ElementsAre(255));
  EXPECT_ERROR(full({1}, -0.5, kUInt8), Value, "value -0.5 cannot be converted to uint8");  // below 0, though it truncates to 0
  EXPECT_ERROR(full({1}, 128, kInt8), Value, "int8 without overflow (int8 holds -128..127)");
  EXPECT_THAT(full({1}, -128, kInt8).to_vector<int8_t>(), ElementsAre(-128));
  EXPECT_ERROR(full({1}, int64_t{1} << 31, kInt32), Value, "int32");
  EXPECT_ERROR(full({1}, std::nan(""), kInt64), Value, "value nan cannot be converted to int64");
  EXPECT_ERROR(full({1}, std::numeric_limits<double>::infinity(), kInt32), Value, "int32 without overflow");
  EXPECT_ERROR(full({1}, 1e20, kInt64), Value, "int64 without overflow");
  EXPECT_ERROR(full({1}, 65520.0, kFloat16), Value, "float16 without overflow");
  EXPECT_ERROR(full({1}, 70000, kFloat16), Value, "value 70000 cannot be converted to float16");
  EXPECT_EQ(full({1}, 65504, kFloat16).item().toDouble(), 65504.0);
  EXPECT_ERROR(full({1}, 1e300, kFloat32), Value, "float32 without overflow");
  EXPECT_ERROR(full({1}, -1e39, kBFloat16), Value, "bfloat16 without overflow");
  EXPECT_TRUE(std::isinf(full({1}, -std::numeric_limits<double>::infinity(), kFloat16).item().toDouble()));
  EXPECT_TRUE(std::isnan(full({1}, std::nan(""), kFloat32).item().toDouble()));
  EXPECT_EQ(full({1}, 1e300, kFloat64).item().toDouble(), 1e300);
  EXPECT_EQ(full({1}, 0.1, kFloat64).item().toDouble(), 0.1);  // item() of a float64 is exact
  EXPECT_THAT(full({2}, 7, kBool).to_vector<bool>(), ElementsAre(true, true));  // bool takes anything
  EXPECT_THAT(full({1}, true, kUInt8).to_vector<uint8_t>(), ElementsAre(1));
  // fill_ checks before it writes or counts a write, an empty tensor's value too.
  const Tensor t = zeros({3}, kUInt8);
  EXPECT_ERROR(t.fill_(256), Value, "fill_: value 256 cannot be converted to uint8 without overflow");
  EXPECT_EQ(t._version(), 0u);
  EXPECT_THAT(t.to_vector<uint8_t>(), ElementsAre(0, 0, 0));
  EXPECT_ERROR(zeros({0}, kInt8).fill_(1000), Value, "fill_: value 1000");
  Tensor through_op = t;
  EXPECT_ERROR(ops::fill_(through_op, -300), Value, "value -300 cannot be converted");
  EXPECT_ERROR(ops::full({2}, 1e6, kFloat16), Value, "full: value 1000000.0 cannot be converted to float16");
  // A meta tensor has no data: any value, as PyTorch's meta fill_.
  EXPECT_NO_THROW(empty({2}, TensorOptions(kUInt8).with_device(kMeta)).fill_(300));
  // A number given to a binary op converts as a C++ cast: uint8 + 300 is 44, as PyTorch's.
  EXPECT_THAT(ops::add(zeros({2}, kUInt8), 300).to_vector<uint8_t>(), ElementsAre(44, 44));
  EXPECT_THAT(ops::mul(ones({1}, kInt8), 200).to_vector<int8_t>(), ElementsAre(-56));
}

TEST(TensorTest, ItemAndEqual) {
  EXPECT_EQ(full({1}, 3).item().toLong(), 3);
  EXPECT_DOUBLE_EQ(full({}, 0.5, kFloat16).item().toDouble(), 0.5);
  EXPECT_ERROR(zeros({2}).item(), Value, "a tensor with 2 elements cannot be converted");
  EXPECT_TRUE(arange(4).equal(arange(4)));
  EXPECT_FALSE(arange(4).equal(arange(4).to(kInt32)));
  EXPECT_FALSE(arange(4).equal(arange(5).slice(0, 1, 5)));
}

TEST(TensorTest, MetaTensorsHaveShapeButNoData) {
  const Tensor m = empty({2, 3}, TensorOptions(kMeta).with_dtype(kFloat16));
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.numel(), 6);
  EXPECT_EQ(m.dtype(), kFloat16);
  EXPECT_EQ(m.key_set(), DispatchKeySet(DispatchKey::Meta));
  EXPECT_ERROR(m.data_ptr(), Device, "cannot access the data of a tensor on the meta device");
  EXPECT_ERROR(m.data_ptr<Half>(), Device, "meta");
  EXPECT_ERROR(m.select(0, 0).select(0, 0).item(), Device, "cannot copy out of a meta tensor");
  EXPECT_ERROR(m.to(kCPU), Device, "meta tensors have no data");
  // Everything that needs no data works.
  const Tensor t = m.transpose(0, 1);
  EXPECT_TRUE(t.is_meta());
  EXPECT_TRUE(t.contiguous().is_contiguous());
  EXPECT_TRUE(zeros({2, 3}).to(kMeta).is_meta());
  EXPECT_TRUE(ones({4}, TensorOptions(kMeta)).is_meta());
  EXPECT_EQ(m.str(), "tensor(..., size=(2, 3), device='meta', dtype=float16)");
}

TEST(TensorTest, KeySetFollowsDeviceAndRequiresGrad) {
  const Tensor t = zeros({2});
  EXPECT_EQ(t.key_set(), DispatchKeySet(DispatchKey::CPU));
  t.set_requires_grad(true);
  EXPECT_EQ(t.key_set(), (DispatchKeySet{DispatchKey::CPU, DispatchKey::AutogradCPU}));
  EXPECT_EQ(t.key_set().highestPriorityKey(), DispatchKey::AutogradCPU);
  // A view is made by its core op; with no autograd layer linked (this binary has only
  // the SDK) the op runs below autograd and the view is plain data.
  EXPECT_FALSE(t.transpose(0, 0).requires_grad());
  t.set_requires_grad(false);
  EXPECT_EQ(t.key_set(), DispatchKeySet(DispatchKey::CPU));
  EXPECT_ERROR(zeros({2}, kInt64).set_requires_grad(true), Type, "only tensors of floating point dtype");
  const Tensor m = empty({1}, TensorOptions(kMeta).with_requires_grad(true));
  EXPECT_EQ(m.key_set(), (DispatchKeySet{DispatchKey::Meta, DispatchKey::AutogradMeta}));
}

// CPU data is 64-byte aligned whatever its size, small (malloc, aligned by hand) or
// large (aligned_alloc), as PyTorch's CPU allocator gives it.
TEST(TensorTest, CpuDataIs64ByteAligned) {
  for (int64_t n : {1, 3, 15, 16, 17, 63, 200, 255, 256, 257, 1000, 100000}) {
    std::vector<Tensor> keep;  // several alive at once, so each gets its own block
    for (int i = 0; i < 8; ++i) {
      keep.push_back(empty({n}, kUInt8));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(keep.back().data_ptr()) % 64, 0u) << n << " bytes";
      std::memset(keep.back().data_ptr(), 0xab, static_cast<size_t>(n));  // every byte is ours (ASan checks)
    }
  }
}

TEST(TensorTest, PrintsLikeTorch) {
  EXPECT_EQ(arange(3, kFloat32).str(), "tensor([0., 1., 2.])");
  EXPECT_EQ(arange(3).str(), "tensor([0, 1, 2])");
  // int64 prints exactly, beyond the 2^53 a double holds.
  // Values are right-aligned to the widest, as torch prints them.
  EXPECT_EQ(from_vector<int64_t>({9007199254740993, -1}).str(), "tensor([9007199254740993,               -1])");
  EXPECT_EQ(from_vector<double>({0.5, 1.25}).str(), "tensor([0.5000, 1.2500], dtype=float64)");
  EXPECT_EQ(from_vector<bool>({true, false}).str(), "tensor([ True, False])");
  EXPECT_EQ(from_vector<float>({1, 10, -100}).str(), "tensor([   1.,   10., -100.])");
  EXPECT_EQ(full({}, 2).str(), "tensor(2.)");  // float32 by default, as torch.full
  EXPECT_EQ(full({}, 2, kInt64).str(), "tensor(2)");
  // Matrices of a 3-d tensor are separated by a blank line, as torch prints them.
  EXPECT_EQ(arange(8, kFloat32).view({2, 2, 2}).str(),
            "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
  // Scientific notation when torch's _Formatter picks it: magnitudes more than 1000x
  // apart, one above 1e8, or a fraction below 1e-4. Zeros and non-finite values do not count.
  EXPECT_EQ(from_vector<float>({3e-5f}).str(), "tensor([3.0000e-05])");
  EXPECT_EQ(from_vector<float>({1e20f, 0}).str(), "tensor([1.0000e+20, 0.0000e+00])");
  EXPECT_EQ(from_vector<float>({1, 1e4f}).str(), "tensor([1.0000e+00, 1.0000e+04])");
  EXPECT_EQ(from_vector<float>({1, 1000, 0, NAN}).str(), "tensor([   1., 1000.,    0.,   nan])");
  EXPECT_EQ(from_vector<float>({0.5f, 1e-3f}).str(), "tensor([0.5000, 0.0010])");
  // An empty tensor names its shape unless it is (0,), and its dtype unless float32.
  EXPECT_EQ(empty({0}).str(), "tensor([])");
  EXPECT_EQ(empty({2, 0}).str(), "tensor([], size=(2, 0))");
  EXPECT_EQ(empty({0}, kInt64).str(), "tensor([], dtype=int64)");
  EXPECT_EQ(empty({0, 3}, kFloat64).str(), "tensor([], size=(0, 3), dtype=float64)");
}

// Above 1,000 elements torch shows three values at each edge of each dim.
TEST(TensorTest, LargeTensorsPrintSummarizedLikeTorch) {
  EXPECT_EQ(ones({1001}).str(), "tensor([1., 1., 1.,  ..., 1., 1., 1.])");
  EXPECT_EQ(arange(1001).str(), "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
  EXPECT_EQ(ones({40, 30}).str(),
            "tensor([[1., 1., 1.,  ..., 1., 1., 1.],\n"
            "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
            "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
            "        ...,\n"
            "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
            "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
            "        [1., 1., 1.,  ..., 1., 1., 1.]])");
  EXPECT_EQ(ones({1000}).str().find("..."), std::string::npos);  // 1,000 is not above the threshold
  // As torch's _Formatter, the format comes from the printed values alone: a 0.5 or a
  // 1000 in the elided middle changes neither the decimals nor the width.
  std::vector<float> v(2001, 1.0f);
  v[1000] = 0.5f;
  EXPECT_EQ(from_vector<float>(v).str(), "tensor([1., 1., 1.,  ..., 1., 1., 1.])");
  v[1000] = 1000.0f;
  EXPECT_EQ(from_vector<float>(v).str(), "tensor([1., 1., 1.,  ..., 1., 1., 1.])");
  // No elements: printed at once, whatever the other sizes.
  EXPECT_EQ(empty({int64_t{1} << 40, 0}).str().rfind("tensor([]", 0), 0u);
}

// Summarizing reads and converts only the printed edge items (torch's
// get_summarized_data): a view of 2^40 elements over one stored value prints at once,
// and the edges of a strided, transposed view are the right ones.
TEST(TensorTest, SummarizedPrintingReadsOnlyTheEdges) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(full({1}, 7, kInt64).as_strided({big}, {0}).str(), "tensor([7, 7, 7,  ..., 7, 7, 7])");
  EXPECT_EQ(ones({1}, kUInt8).as_strided({big, 2}, {0, 0}).str(),
            "tensor([[1, 1],\n        [1, 1],\n        [1, 1],\n        ...,\n        [1, 1],\n"
            "        [1, 1],\n        [1, 1]], dtype=uint8)");
  // arange(0, 2000) as a 40 x 50 matrix, transposed: rows are columns of the original.
  const Tensor t = arange(2000).view({40, 50}).transpose(0, 1);
  EXPECT_EQ(t.str(),
            "tensor([[   0,   50,  100,  ..., 1850, 1900, 1950],\n"
            "        [   1,   51,  101,  ..., 1851, 1901, 1951],\n"
            "        [   2,   52,  102,  ..., 1852, 1902, 1952],\n"
            "        ...,\n"
            "        [  47,   97,  147,  ..., 1897, 1947, 1997],\n"
            "        [  48,   98,  148,  ..., 1898, 1948, 1998],\n"
            "        [  49,   99,  149,  ..., 1899, 1949, 1999]])");
  // Every other element of a float range: the format comes from the edges only (1 to
  // 3999 span more than 1000x, so torch prints them in scientific notation).
  EXPECT_EQ(arange(0, 4000, 1, TensorOptions(kFloat64)).slice(0, 1, 4000, 2).str(),
            "tensor([1.0000e+00, 3.0000e+00, 5.0000e+00,  ..., 3.9950e+03, 3.9970e+03, 3.9990e+03], dtype=float64)");
  EXPECT_EQ(arange(0, 4000, 1, TensorOptions(kFloat64)).slice(0, 1001, 4000, 2).str(),
            "tensor([1001., 1003., 1005.,  ..., 3995., 3997., 3999.], dtype=float64)");
  // Showing more than 2^22 values prints the size only (9 dims of 7, expanded).
  const Tensor wide = ones({1}).as_strided(std::vector<int64_t>(9, 7), std::vector<int64_t>(9, 0));
  EXPECT_EQ(wide.str(), "tensor(..., size=(7, 7, 7, 7, 7, 7, 7, 7, 7))");
}

// Values print one nested level per dim; a tensor of very many dims prints its size
// instead of recursing that deep.
TEST(TensorTest, TensorsOfManyDimsPrintTheirSizeNotAStackOverflow) {
  const Tensor deep = ones(std::vector<int64_t>(40000, 1));
  EXPECT_EQ(deep.dim(), 40000);
  const std::string s = deep.str();
  EXPECT_EQ(s.rfind("tensor(..., size=(1, 1, 1, ", 0), 0u) << s.substr(0, 80);
  // Up to 64 dims, values as torch prints them.
  EXPECT_EQ(ones(std::vector<int64_t>(64, 1)).str(), "tensor(" + std::string(64, '[') + "1." + std::string(64, ']') + ")");
}

// The storage check bounds the bytes a view spans; a stride-0 view may still claim
// more elements than 64 bits count, which is refused rather than overflowed.
TEST(TensorTest, ElementCountsThatOverflowAreRefused) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_ERROR(ones({1}).as_strided({big, big}, {0, 0}), Value,
               "sizes [1099511627776, 1099511627776] hold more elements than fit in 64 bits");
  EXPECT_EQ(ones({1}).as_strided({big, big, 0}, {0, 0, 0}).numel(), 0);  // a 0 size: empty, whatever the rest
  EXPECT_EQ(ones({1}).as_strided({big}, {0}).numel(), big);
}

// Concurrency: handles to one tensor copied and dropped on several threads; the
// refcount must end where it started (run under TSan: label "concurrency").
TEST(TensorConcurrencyTest, RefcountIsThreadSafe) {
  const Tensor t = zeros({4});
  const uint32_t before = t.getIntrusivePtr().use_count();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([t] {
      for (int k = 0; k < 20000; ++k) {
        Tensor copy = t;
        Tensor view = copy.slice(0, 0, 2);
        (void)view.numel();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.getIntrusivePtr().use_count(), before);
}

}  // namespace
}  // namespace strata
