// The PyTorch extension shim (strata/torch_compat.h) in-process: what an extension's
// code can write, and how its kernels register, without a bundle.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/extension.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "strata/dispatcher.h"
#include "strata/ops.h"

namespace {

using ::testing::HasSubstr;

// Kernels written as in a PyTorch extension, one per kind of signature.
at::Tensor twice_cpu(at::Tensor x) { return x * 2.0; }
at::Tensor scale_cpu(const at::Tensor& x, double f) { return x * f; }
at::Tensor& add_out_cpu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TORCH_CHECK(out.sizes() == a.sizes(), "out has sizes ", out.sizes(), ", expected ", a.sizes());
  out.copy_(a + b);
  return out;
}
void fill_cpu(at::Tensor& out, double v) { out.fill_(v); }
std::tuple<at::Tensor, at::Tensor> split_cpu(const at::Tensor& x) { return {x + 1.0, x - 1.0}; }
at::Tensor sum_all_cpu(at::TensorList xs) {
  at::Tensor acc = torch::zeros(xs[0].sizes(), xs[0].options());
  for (const at::Tensor& x : xs) acc = acc + x;
  return acc;
}
at::Tensor maybe_add_cpu(const at::Tensor& x, const std::optional<at::Tensor>& y) { return y ? x + *y : x; }
at::Tensor new_like_cpu(const at::Tensor& x, c10::IntArrayRef size) { return torch::ones(size, x.options()); }

// Static registrations outside a bundle run at static initialization, as PyTorch's do.
TORCH_LIBRARY_FRAGMENT(compat_test, m) {
  m.def("twice(Tensor x) -> Tensor");
  m.def("scale(Tensor x, float f) -> Tensor");
  m.def("add_out(Tensor a, Tensor b, Tensor(a!) out) -> Tensor(a!)");
  m.def("fill(Tensor(a!) out, float v) -> ()");
  m.def("split(Tensor x) -> (Tensor, Tensor)");
  m.def("sum_all(Tensor[] xs) -> Tensor");
  m.def("maybe_add(Tensor x, Tensor? y) -> Tensor");
  m.def("new_like(Tensor x, int[] size) -> Tensor");
}
TORCH_LIBRARY_IMPL(compat_test, CPU, m) {
  m.impl("twice", &twice_cpu);
  m.impl("scale", TORCH_FN(scale_cpu));
  m.impl("add_out", &add_out_cpu);
  m.impl("fill", &fill_cpu);
  m.impl("split", &split_cpu);
  m.impl("sum_all", &sum_all_cpu);
  m.impl("maybe_add", &maybe_add_cpu);
  m.impl("new_like", &new_like_cpu);
}
// A second kernel of one op whose C++ parameters differ only in Tensor vs const
// Tensor&: both normalize to the same signature (Note [Kernels with at::Tensor]).
at::Tensor twice_default(const at::Tensor& x) { return x + x; }
TORCH_LIBRARY_IMPL(compat_test, CompositeExplicitAutograd, m) { m.impl("twice", &twice_default); }

static_assert(torch::detail::strata_supports_dispatch_key::Python == strata::DispatchKey::Mode);
static_assert(torch::detail::strata_supports_dispatch_key::FuncTorchBatched == strata::DispatchKey::Batched);
static_assert(torch::detail::strata_supports_dispatch_key::Autocast == strata::DispatchKey::AutocastCUDA);

strata::OperatorHandle op(const char* name) { return strata::Dispatcher::singleton().findSchemaOrThrow(name); }

TEST(TorchCompat, TensorSpeaksAtenMetadata) {
  const at::Tensor a = torch::ones({2, 3});
  const at::Tensor b = torch::empty({2, 3}, torch::TensorOptions().dtype(torch::kFloat32));
  EXPECT_TRUE(a.sizes() == b.sizes());
  EXPECT_TRUE(a.sizes() == std::vector<int64_t>({2, 3}));
  EXPECT_FALSE(a.sizes() == torch::ones({3, 2}).sizes());
  EXPECT_EQ(a.sizes().vec(), std::vector<int64_t>({2, 3}));
  EXPECT_EQ(c10::str(a.sizes()), "[2, 3]");
  EXPECT_TRUE(a.dtype() == at::kFloat);
  EXPECT_TRUE(a.device().type() == at::DeviceType::CPU);
  EXPECT_TRUE(a.device() == torch::kCPU);
  EXPECT_EQ(a.device().index(), -1);
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.numel(), 6);
  EXPECT_EQ(a.options().dtype(), at::kFloat);
  EXPECT_EQ(a.options().device(), at::Device(at::kCPU));

  const at::Tensor t = a.transpose(0, 1);
  EXPECT_FALSE(t.is_contiguous());
  const at::Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(c.sizes() == at::IntArrayRef({3, 2}));
  EXPECT_EQ(c.data_ptr<float>()[0], 1.0f);
  EXPECT_THROW(c.data_ptr<double>(), c10::Error);

  const at::Tensor l = torch::empty_like(a, at::kLong);
  EXPECT_EQ(l.scalar_type(), at::kLong);
  EXPECT_TRUE(l.sizes() == a.sizes());
  EXPECT_EQ(torch::full({1}, 2.5).item<double>(), 2.5);
  const at::Tensor m = torch::empty({4}, at::device(at::kMeta).dtype(at::kHalf));
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.dtype(), at::kHalf);
  int n = 0;
  for (int64_t i : c10::irange(a.dim())) n += static_cast<int>(a.size(i));
  EXPECT_EQ(n, 5);

  // Every strata::Tensor is an at::Tensor and back.
  strata::Tensor s = a;
  at::Tensor back = strata::ops::mul(s, 3.0);
  EXPECT_EQ(back.data_ptr<float>()[5], 3.0f);
}

TEST(TorchCompat, ChecksThrowWithPyTorchsMessages) {
  const at::Tensor a = torch::ones({2});
  try {
    TORCH_CHECK(a.dtype() == at::kInt);
    FAIL() << "TORCH_CHECK did not throw";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.kind(), strata::ErrorKind::Value);
    EXPECT_STREQ(e.what(), "Expected a.dtype() == at::kInt to be true, but got false.");
  }
  try {
    TORCH_CHECK(a.numel() == 3, "expected 3 elements, got ", a.numel(), " of ", a.dtype(), " on ", a.device());
    FAIL() << "TORCH_CHECK did not throw";
  } catch (const strata::Error& e) {
    EXPECT_STREQ(e.what(), "expected 3 elements, got 2 of float32 on cpu");
  }
  try {
    TORCH_CHECK_TYPE(false, "no");
  } catch (const strata::Error& e) {
    EXPECT_EQ(e.kind(), strata::ErrorKind::Type);
  }
  try {
    TORCH_INTERNAL_ASSERT(a.is_cuda(), "needs cuda");
    FAIL() << "TORCH_INTERNAL_ASSERT did not throw";
  } catch (const strata::Error& e) {
    EXPECT_EQ(e.kind(), strata::ErrorKind::Internal);
    EXPECT_THAT(e.what(), HasSubstr("INTERNAL ASSERT FAILED at"));
    EXPECT_THAT(e.what(), HasSubstr("torch_compat_test.cc"));
    EXPECT_THAT(e.what(), HasSubstr("a.is_cuda(). needs cuda"));
  }
  EXPECT_THROW(AT_DISPATCH_FLOATING_TYPES(at::kLong, "f", [&] { return sizeof(scalar_t); }), strata::Error);
  EXPECT_EQ(AT_DISPATCH_FLOATING_TYPES(at::kDouble, "f", [&] { return sizeof(scalar_t); }), 8u);
}

TEST(TorchCompat, KernelsWithAtTypesRegisterWithStrataSignatures) {
  const at::Tensor x = torch::ones({3});
  // One normalized signature for the CPU kernel (at::Tensor) and the default one
  // (const at::Tensor&): a typed call with Strata's usual signature reaches both.
  auto twice = op("compat_test::twice").typed<strata::Tensor(const strata::Tensor&)>();
  EXPECT_TRUE(strata::ops::allclose(twice.call(x), torch::full({3}, 2.0)));
  EXPECT_TRUE(twice.call(torch::ones({3}, at::kMeta)).is_meta());  // the CompositeExplicitAutograd kernel
  EXPECT_EQ(strata::get_kernel("compat_test::twice", "cpu").owner(), "user");

  auto scale = op("compat_test::scale").typed<strata::Tensor(const strata::Tensor&, double)>();
  EXPECT_TRUE(strata::ops::allclose(scale.call(x, 1.5), torch::full({3}, 1.5)));

  // An out= kernel returns the caller's own tensor.
  strata::Tensor out = torch::zeros({3});
  auto add_out = op("compat_test::add_out").typed<strata::Tensor&(const strata::Tensor&, const strata::Tensor&,
                                                                   strata::Tensor&)>();
  strata::Tensor& r = add_out.call(x, x, out);
  EXPECT_EQ(&r, &out);
  EXPECT_TRUE(strata::ops::allclose(out, torch::full({3}, 2.0)));
  try {
    strata::Tensor small = torch::zeros({2});
    add_out.call(x, x, small);
    FAIL() << "add_out did not throw";
  } catch (const strata::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("out has sizes [2], expected [3]"));
  }

  strata::Stack stack{strata::IValue(strata::Tensor(torch::zeros({2}))), strata::IValue(4.0)};
  const strata::Tensor filled = stack[0].toTensor();
  op("compat_test::fill").callBoxed(stack);
  EXPECT_TRUE(strata::ops::allclose(filled, torch::full({2}, 4.0)));

  auto split = op("compat_test::split").typed<std::tuple<strata::Tensor, strata::Tensor>(const strata::Tensor&)>();
  auto [p, q] = split.call(x);
  EXPECT_TRUE(strata::ops::allclose(p, torch::full({3}, 2.0)));
  EXPECT_TRUE(strata::ops::allclose(q, torch::zeros({3})));

  strata::Stack list{strata::IValue(std::vector<strata::Tensor>{x, x, x})};
  op("compat_test::sum_all").callBoxed(list);
  EXPECT_TRUE(strata::ops::allclose(list[0].toTensor(), torch::full({3}, 3.0)));

  strata::Stack none{strata::IValue(strata::Tensor(x)), strata::IValue()};
  op("compat_test::maybe_add").callBoxed(none);
  EXPECT_TRUE(strata::ops::allclose(none[0].toTensor(), x));
  strata::Stack some{strata::IValue(strata::Tensor(x)), strata::IValue(strata::Tensor(x))};
  op("compat_test::maybe_add").callBoxed(some);
  EXPECT_TRUE(strata::ops::allclose(some[0].toTensor(), torch::full({3}, 2.0)));

  strata::Stack sized{strata::IValue(strata::Tensor(x)), strata::IValue(std::vector<int64_t>{2, 2})};
  op("compat_test::new_like").callBoxed(sized);
  EXPECT_EQ(sized[0].toTensor().sizes().size(), 2u);
  EXPECT_EQ(sized[0].toTensor().numel(), 4);
}

}  // namespace
