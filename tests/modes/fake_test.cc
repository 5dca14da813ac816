// Fake tensors and FakeTensorMode, register_fake and its errors, get_ctx and symbolic
// sizes through the core:: ops' Meta kernels, and the seeds' custom_linear and
// custom_nonzero examples. Each test defines its ops in its own namespace.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "../dispatch/test_util.h"
#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/fake.h"
#include "strata/ops.h"
#include "strata/sym_int.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using modes::FakeTensorMode;
using modes::is_fake;
using modes::ModeGuard;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using strata::testing::errorOf;

std::vector<int64_t> shape(const Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }

struct FakeScope {
  std::shared_ptr<FakeTensorMode> mode = std::make_shared<FakeTensorMode>();
  ModeGuard guard{mode};
};

TEST(FakeTensorMode, FactoriesMakeFakeTensorsThatClaimADeviceAndHoldNoData) {
  FakeScope fake;
  const Tensor x = ops::rand({2, 3});
  EXPECT_TRUE(is_fake(x));
  EXPECT_EQ(shape(x), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(x.dtype(), ScalarType::Float);
  EXPECT_TRUE(x.is_cpu());
  EXPECT_TRUE(x.key_set().has(DispatchKey::Fake));
  EXPECT_TRUE(x.key_set().has(DispatchKey::CPU));
  // A cuda fake tensor needs no GPU: it has no memory.
  const Tensor c = ops::ones({4}, ScalarType::Half, Device(DeviceType::CUDA, 0));
  EXPECT_TRUE(is_fake(c));
  EXPECT_TRUE(c.is_cuda());
  EXPECT_EQ(c.dtype(), ScalarType::Half);
  EXPECT_THAT(errorOf([&] { (void)x.data_ptr(); }), AllOf(HasSubstr("data_ptr()"), HasSubstr("a fake tensor (cpu")));
  EXPECT_THAT(errorOf([&] { (void)x.item(); }), HasSubstr("fake tensor"));
}

TEST(FakeTensorMode, CoreOpsRunTheirMetaKernelsAndKeepDevicesAndAliases) {
  FakeScope fake;
  const Tensor a = ops::ones({2, 3});
  const Tensor b = ops::ones({3}, ScalarType::Double);
  const Tensor s = ops::add(a, b);
  EXPECT_TRUE(is_fake(s));
  EXPECT_EQ(shape(s), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s.dtype(), ScalarType::Double);
  const Tensor m = ops::matmul(a, ops::ones({3, 5}));
  EXPECT_EQ(shape(m), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(shape(ops::sum(a, std::vector<int64_t>{1})), (std::vector<int64_t>{2}));
  // A view shares its base's (fake) storage.
  const Tensor t = ops::transpose(a, 0, 1);
  EXPECT_TRUE(is_fake(t));
  EXPECT_TRUE(t.is_alias_of(a));
  EXPECT_EQ(shape(t), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t.strides()[0], 1);
  EXPECT_FALSE(ops::clone(a).is_alias_of(a));
  // Devices: the output keeps the inputs' device; two devices are PyTorch's error.
  const Tensor g = ops::ones({3}, std::nullopt, Device(DeviceType::CUDA, 0));
  EXPECT_TRUE(ops::mul(g, g).is_cuda());
  EXPECT_THAT(errorOf([&] { ops::add(a, g); }), AllOf(HasSubstr("core::add.Tensor"), HasSubstr("two devices")));
  // A 0-d cpu tensor mixes with any device.
  EXPECT_TRUE(ops::add(g, ops::ones({})).is_cuda());
}

TEST(FakeTensorMode, RealTensorsAreConvertedOnceAndTheirAliasesStayAliases) {
  auto mode = std::make_shared<FakeTensorMode>();
  const Tensor real = ones({4, 2});
  const Tensor view = real.transpose(0, 1);
  const Tensor f1 = mode->from_tensor(real);
  EXPECT_TRUE(is_fake(f1));
  EXPECT_EQ(mode->from_tensor(real).unsafeGetTensorImpl(), f1.unsafeGetTensorImpl());
  const Tensor f2 = mode->from_tensor(view);
  EXPECT_TRUE(f2.is_alias_of(f1));
  EXPECT_EQ(shape(f2), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(mode->from_tensor(f1).unsafeGetTensorImpl(), f1.unsafeGetTensorImpl());
  {
    ModeGuard g(mode);
    const Tensor r = ops::add(real, real);  // a real argument becomes fake
    EXPECT_TRUE(is_fake(r));
  }
  EXPECT_FLOAT_EQ(real.to_vector<float>()[0], 1.0f);  // the real tensor is untouched
  auto other = std::make_shared<FakeTensorMode>();
  EXPECT_THAT(errorOf([&] { other->from_tensor(f1); }), HasSubstr("another FakeTensorMode"));
}

TEST(FakeTensorMode, FakeTensorsUsedOutsideTheModeRunUnderTheirOwnMode) {
  auto mode = std::make_shared<FakeTensorMode>();
  const Tensor f = mode->from_tensor(ones({3}));
  const Tensor r = ops::mul(f, f);  // no mode pushed: the Fake key re-enters f's mode
  EXPECT_TRUE(is_fake(r));
  EXPECT_EQ(modes::mode_stack_size(), 0u);
  auto other = std::make_shared<FakeTensorMode>();
  const Tensor g = other->from_tensor(ones({3}));
  EXPECT_THAT(errorOf([&] { ops::add(f, g); }), HasSubstr("two FakeTensorModes"));
  std::weak_ptr<FakeTensorMode> gone;
  Tensor orphan;
  {
    auto m = std::make_shared<FakeTensorMode>();
    orphan = m->from_tensor(ones({2}));
    gone = m;
  }
  EXPECT_TRUE(gone.expired());
  EXPECT_THAT(errorOf([&] { ops::neg(orphan); }), HasSubstr("FakeTensorMode is gone"));
}

// fill_ and zero_ of a fake tensor, outside its mode too, make nothing of its size: a
// 2^20 x 2^20 fake (4 TiB as floats) and one that claims a CUDA device.
TEST(FakeTensorMode, FillOfAFakeTensorAllocatesNothing) {
  auto mode = std::make_shared<FakeTensorMode>();
  Tensor big;
  {
    modes::ModeGuard guard(mode);
    big = ops::empty({int64_t{1} << 20, int64_t{1} << 20});
  }
  ASSERT_TRUE(is_fake(big));
  big.fill_(1.5);
  big.zero_();
  EXPECT_TRUE(is_fake(big));
  EXPECT_EQ(big.size(0), int64_t{1} << 20);
  Tensor on_cuda;
  {
    modes::ModeGuard guard(mode);
    on_cuda = ops::empty({4}, ScalarType::Float, Device(DeviceType::CUDA, 0));
  }
  on_cuda.fill_(2.0);
  EXPECT_TRUE(on_cuda.device().is_cuda());
}

std::atomic<int> g_cpu_calls{0};

TEST(FakeTensorMode, NoRealKernelEverRunsAndAnOpWithoutAFakeImplSaysHowToAddOne) {
  Library lib(Library::DEF, "fake_norun");
  lib.def("cpu_only(Tensor x) -> Tensor");
  lib.def("with_meta(Tensor x) -> Tensor");
  lib.def("default_only(Tensor x) -> Tensor");
  lib.impl("cpu_only", [](const Tensor& x) { ++g_cpu_calls; return x.clone(); }, "cpu");
  lib.impl("with_meta", [](const Tensor& x) { ++g_cpu_calls; return x.clone(); }, "cpu");
  lib.impl("with_meta", [](const Tensor& x) { return empty(x.sizes(), TensorOptions(x.dtype()).with_device(kMeta)); },
           "meta");
  lib.impl("default_only", [](const Tensor& x) { ++g_cpu_calls; return x.clone(); }, "default");
  auto call = [](const char* name, const Tensor& x) {
    return Dispatcher::singleton().findSchemaOrThrow(name).typed<Tensor(const Tensor&)>().call(x);
  };
  FakeScope fake;
  const Tensor x = ops::ones({5});
  const Tensor y = call("fake_norun::with_meta", x);
  EXPECT_TRUE(is_fake(y));
  EXPECT_EQ(g_cpu_calls.load(), 0);
  EXPECT_THAT(errorOf([&] { call("fake_norun::cpu_only", x); }),
              AllOf(HasSubstr("fake_norun::cpu_only has no fake implementation"), HasSubstr("register_fake")));
  // A "default" kernel is a real kernel too.
  EXPECT_THAT(errorOf([&] { call("fake_norun::default_only", x); }),
              AllOf(HasSubstr("fake_norun::default_only has no fake implementation"), HasSubstr("default kernel")));
  EXPECT_EQ(g_cpu_calls.load(), 0);
  // An admin who disables the Meta kernel disables it under the mode too.
  KernelEnabledScope off("fake_norun::with_meta", "meta", false);
  // Switched off where there is nothing to switch: still "register one".
  {
    KernelEnabledScope none("fake_norun::cpu_only", "meta", false);
    EXPECT_THAT(errorOf([&] { call("fake_norun::cpu_only", x); }),
                AllOf(HasSubstr("has no fake implementation: FakeTensorMode"), HasSubstr("register_fake")));
  }
  // The error says how to turn it on, not to register another.
  EXPECT_THAT(errorOf([&] { call("fake_norun::with_meta", x); }),
              AllOf(HasSubstr("its Meta kernel (the fake impl) is disabled"),
                    HasSubstr("strata kernel enable fake_norun::with_meta meta"), ::testing::Not(HasSubstr("register_fake"))));
}

// PyTorch's DataDependentOutputException / DynamicOutputShapeException: a Meta
// kernel cannot describe what depends on data; a fake impl can.
TEST(FakeTensorMode, OpsTaggedAsDependingOnDataNeedAFakeImplNotAMetaKernel) {
  Library lib(Library::DEF, "fake_tagged");
  lib.def("first_value(Tensor x) -> Tensor", {Tag::data_dependent_output});
  lib.def("keep_positive(Tensor x) -> Tensor", {Tag::dynamic_output_shape});
  lib.def("plain(Tensor x) -> Tensor");
  auto meta = [](const Tensor& x) { return empty(x.sizes(), TensorOptions(x.dtype()).with_device(kMeta)); };
  lib.impl("first_value", meta, "meta");
  lib.impl("keep_positive", meta, "meta");
  lib.impl("plain", meta, "meta");
  auto call = [](const char* name, const Tensor& x) {
    return Dispatcher::singleton().findSchemaOrThrow(name).typed<Tensor(const Tensor&)>().call(x);
  };
  // The Meta kernels still serve meta tensors: the tags speak of fake tensors only.
  EXPECT_TRUE(call("fake_tagged::first_value", empty({3}, kMeta)).is_meta());
  FakeScope fake;
  const Tensor x = ops::ones({4});
  EXPECT_TRUE(is_fake(call("fake_tagged::plain", x)));
  EXPECT_THAT(errorOf([&] { call("fake_tagged::first_value", x); }),
              AllOf(HasSubstr("fake_tagged::first_value is tagged data_dependent_output"),
                    HasSubstr("values depend on its inputs' data"), HasSubstr("register_fake")));
  EXPECT_THAT(errorOf([&] { call("fake_tagged::keep_positive", x); }),
              AllOf(HasSubstr("fake_tagged::keep_positive is tagged dynamic_output_shape"),
                    HasSubstr("new_dynamic_size")));
  // With a fake impl (register_fake refuses an op with a Meta kernel, so a new op).
  lib.def("keep_positive2(Tensor x) -> Tensor", {Tag::dynamic_output_shape});
  modes::register_fake("fake_tagged::keep_positive2", [](const Tensor& x) {
    return ops::empty({modes::get_ctx().new_dynamic_size(0, x.numel())}, x.scalar_type(), x.device());
  }, lib);
  const Tensor y = call("fake_tagged::keep_positive2", x);
  ASSERT_TRUE(is_fake(y));
  EXPECT_TRUE(y.sym_size(0).is_symbolic());
}

TEST(RegisterFake, TheSeedsCustomLinearGivesTwoByThree) {
  Library lib(Library::DEF, "fake_linear");
  lib.def("custom_linear(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  lib.impl("custom_linear", [](const Tensor&, const Tensor&, const Tensor&) -> Tensor {
    STRATA_FAIL(NotImplemented, "Implementation goes here");
  }, "cpu");
  modes::register_fake("fake_linear::custom_linear", [](const Tensor& x, const Tensor& weight, const Tensor& bias) {
    STRATA_CHECK(x.dim() == 2 && weight.dim() == 2 && bias.dim() == 1, Value, "dims");
    STRATA_CHECK(x.size(1) == weight.size(1) && weight.size(0) == bias.size(0), Value, "sizes");
    STRATA_CHECK(x.device() == weight.device(), Value, "devices");
    return ops::add(ops::matmul(x, ops::t(weight)), bias);
  }, lib);
  const auto op = Dispatcher::singleton().findSchemaOrThrow("fake_linear::custom_linear")
                      .typed<Tensor(const Tensor&, const Tensor&, const Tensor&)>();
  {
    FakeScope fake;
    const Tensor y = op.call(ops::rand({2, 3}), ops::rand({3, 3}), ops::rand({3}));
    EXPECT_TRUE(is_fake(y));
    EXPECT_EQ(shape(y), (std::vector<int64_t>{2, 3}));
    EXPECT_TRUE(y.is_cpu());
  }
  // The fake impl also serves meta tensors.
  const Tensor m = op.call(empty({4, 3}, kMeta), empty({5, 3}, kMeta), empty({5}, kMeta));
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(shape(m), (std::vector<int64_t>{4, 5}));
  // It is recorded, and dumped, as a fake impl at Meta.
  bool recorded = false;
  for (const auto& r : Dispatcher::singleton().registrations(parseOperatorName("fake_linear::custom_linear"))) {
    recorded |= r.key == DispatchKey::Meta && r.kind == "fake";
  }
  EXPECT_TRUE(recorded);
  EXPECT_THAT(dump("fake_linear::custom_linear"), HasSubstr("kernel [fake, owner user"));
}

TEST(RegisterFake, ErrorsNameTheOpAndTheReason) {
  Library lib(Library::DEF, "fake_errs");
  lib.def("a(Tensor x) -> Tensor");
  lib.def("with_meta(Tensor x) -> Tensor");
  lib.def("composite", [](const Tensor& x) { return ops::neg(x); });
  lib.impl("with_meta", [](const Tensor& x) { return x; }, "meta");
  auto same = [](const Tensor& x) { return ops::empty_like(x); };
  EXPECT_THAT(errorOf([&] { (void)modes::register_fake("fake_errs::nope", same); }),
              AllOf(HasSubstr("register_fake(fake_errs::nope)"), HasSubstr("no operator named")));
  EXPECT_THAT(errorOf([&] { (void)modes::register_fake("fake_errs::with_meta", same); }),
              AllOf(HasSubstr("fake_errs::with_meta already has a Meta kernel")));
  EXPECT_THAT(errorOf([&] { (void)modes::register_fake("fake_errs::composite", same); }),
              AllOf(HasSubstr("fake_errs::composite has a CompositeImplicitAutograd kernel")));
  EXPECT_THAT(errorOf([&] { (void)modes::register_fake("fake_errs::a", [](const Tensor& x, int64_t) { return x; }); }),
              HasSubstr("does not match the operator's schema"));
  {
    auto first = modes::register_fake("fake_errs::a", same);
    EXPECT_THAT(errorOf([&] { (void)modes::register_fake("fake_errs::a", same); }),
                AllOf(HasSubstr("fake_errs::a already has a fake implementation"), HasSubstr("allow_override")));
    // allow_override replaces it; the replaced one comes back when the newer one goes.
    auto second = modes::register_fake("fake_errs::a", [](const Tensor& x) { return ops::sum(x); }, true);
    FakeScope fake;
    const auto op = Dispatcher::singleton().findSchemaOrThrow("fake_errs::a").typed<Tensor(const Tensor&)>();
    EXPECT_EQ(op.call(ops::ones({3})).dim(), 0);
    second.reset();
    EXPECT_EQ(op.call(ops::ones({3})).dim(), 1);
  }
  // RAII: the handle gone, the op has no fake impl again.
  FakeScope fake;
  EXPECT_THAT(errorOf([&] {
                Dispatcher::singleton().findSchemaOrThrow("fake_errs::a").typed<Tensor(const Tensor&)>().call(
                    ops::ones({3}));
              }),
              HasSubstr("has no fake implementation"));
}

TEST(RegisterFake, AFakeImplThatReturnsRealDataIsAnError) {
  Library lib(Library::DEF, "fake_real");
  lib.def("r(Tensor x) -> Tensor");
  modes::register_fake("fake_real::r", [](const Tensor& x) { return ones(x.sizes()); }, lib);  // not an op
  FakeScope fake;
  EXPECT_THAT(errorOf([&] {
                Dispatcher::singleton().findSchemaOrThrow("fake_real::r").typed<Tensor(const Tensor&)>().call(
                    ops::ones({3}));
              }),
              AllOf(HasSubstr("fake_real::r"), HasSubstr("returned a tensor with data")));
}

TEST(GetCtx, IsAnErrorOutsideAFakeImpl) {
  EXPECT_THAT(errorOf([] { modes::get_ctx(); }), HasSubstr("only valid inside a fake implementation"));
  Library lib(Library::DEF, "fake_ctx");
  lib.def("nz(Tensor x) -> Tensor");
  modes::register_fake("fake_ctx::nz", [](const Tensor& x) {
    const SymInt n = modes::get_ctx().new_dynamic_size();
    return ops::empty({n, x.dim()}, ScalarType::Long, x.device());
  }, lib);
  // Serving meta tensors, a fake impl has no context.
  EXPECT_THAT(errorOf([] {
                Dispatcher::singleton().findSchemaOrThrow("fake_ctx::nz").typed<Tensor(const Tensor&)>().call(
                    empty({3}, kMeta));
              }),
              HasSubstr("get_ctx() is only valid"));
}

// The seeds' custom_nonzero: a data-dependent output size.
TEST(GetCtx, TheSeedsCustomNonzeroGivesASymbolicSizeWithItsRange) {
  Library lib(Library::DEF, "fake_nonzero");
  lib.def("custom_nonzero(Tensor x) -> Tensor");
  lib.impl("custom_nonzero", [](const Tensor& x) {
    const Tensor c = x.contiguous();
    std::vector<int64_t> idx;
    const float* p = c.data_ptr<float>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      if (p[i] != 0) idx.push_back(i);
    }
    return from_vector(idx, std::vector<int64_t>{static_cast<int64_t>(idx.size()), 1});
  }, "cpu");
  modes::register_fake("fake_nonzero::custom_nonzero", [](const Tensor& x) {
    const SymInt nnz = modes::get_ctx().new_dynamic_size(0, x.numel());
    return ops::empty({nnz, x.dim()}, ScalarType::Long, x.device());
  }, lib);
  const auto op =
      Dispatcher::singleton().findSchemaOrThrow("fake_nonzero::custom_nonzero").typed<Tensor(const Tensor&)>();
  // The real kernel on real data.
  const Tensor real = op.call(from_vector<float>({0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(shape(real), (std::vector<int64_t>{4, 1}));

  FakeScope fake;
  const Tensor y = op.call(from_vector<float>({0, 1, 2, 3, 4, 0}));
  ASSERT_TRUE(is_fake(y));
  EXPECT_EQ(y.dim(), 2);
  const SymInt u0 = y.sym_size(0);
  EXPECT_TRUE(u0.is_symbolic());
  EXPECT_EQ(u0.str(), "u0");
  EXPECT_EQ(u0.range().min, 0);
  EXPECT_EQ(u0.range().max, 6);
  EXPECT_EQ(y.size(1), 1);
  EXPECT_EQ(y.dtype(), ScalarType::Long);
  EXPECT_EQ(y.sym_numel().str(), "u0");
  // A second call makes the next symbol.
  EXPECT_EQ(op.call(ops::ones({2, 2})).sym_size(0).str(), "u1");
  EXPECT_EQ(fake.mode->num_symbols(), 2u);
}

// Symbolic sizes through the core ops' Meta kernels (Note [Symbolic sizes]).
class SymbolicSizes : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_.def("nz(Tensor x) -> Tensor");
    modes::register_fake("fake_sym::nz", [](const Tensor& x) {
      const SymInt n = modes::get_ctx().new_dynamic_size(0, x.numel());
      return ops::empty({n, 3}, std::nullopt, x.device());
    }, lib_);
  }
  Tensor nz(const Tensor& x) {
    return Dispatcher::singleton().findSchemaOrThrow("fake_sym::nz").typed<Tensor(const Tensor&)>().call(x);
  }
  Library lib_{Library::DEF, "fake_sym"};
  FakeScope fake_;
};

TEST_F(SymbolicSizes, FlowThroughElementwiseOpsReductionsMatmulAndViews) {
  const Tensor y = nz(ops::ones({8}));
  const SymInt u0 = y.sym_size(0);
  // Elementwise over equal symbols, and with a broadcast 1.
  EXPECT_EQ(ops::add(y, y).sym_size(0), u0);
  EXPECT_EQ(ops::mul(y, ops::ones({1, 3})).sym_size(0), u0);
  EXPECT_EQ(ops::exp(y).sym_size(0), u0);
  // Strides and numel are symbolic expressions.
  const Tensor y3 = ops::unsqueeze(y, 0);
  EXPECT_EQ(y3.sym_numel().str(), "3*u0");
  EXPECT_TRUE(y.is_contiguous());
  // Reductions: over the symbolic dim it goes; over the other it stays.
  EXPECT_THAT(shape(ops::sum(y, std::vector<int64_t>{0})), ElementsAre(3));
  EXPECT_EQ(ops::sum(y, std::vector<int64_t>{1}).sym_size(0), u0);
  EXPECT_EQ(ops::sum(y).dim(), 0);
  // matmul with a symbolic batch.
  const Tensor mm = ops::matmul(y, ops::ones({3, 4}));
  EXPECT_EQ(mm.sym_size(0), u0);
  EXPECT_EQ(mm.size(1), 4);
  const Tensor batched = ops::matmul(ops::reshape(ops::unsqueeze(y, 1), {-1, 1, 3}), ops::ones({3, 2}));
  EXPECT_EQ(batched.sym_size(0), u0);
  EXPECT_THAT(std::vector<int64_t>(batched.sizes().begin() + 1, batched.sizes().end()), ElementsAre(1, 2));
  // Views: reshape to -1 infers a symbolic size; transpose keeps it.
  EXPECT_EQ(ops::reshape(y, {-1}).sym_size(0).str(), "3*u0");
  EXPECT_EQ(ops::transpose(y, 0, 1).sym_size(1), u0);
  EXPECT_EQ(ops::reshape(ops::reshape(y, {-1}), {-1, 3}).sym_size(0), u0);
  // cat adds symbolic sizes; select on a dim with a symbolic stride keeps the offset symbolic.
  EXPECT_EQ(ops::cat({y, y}, 0).sym_size(0).str(), "2*u0");
  EXPECT_EQ(ops::cat({y, ops::ones({2, 3})}, 0).sym_size(0).str(), "u0 + 2");
  const Tensor yt = ops::contiguous(ops::transpose(y, 0, 1));  // [3, u0], strides [u0, 1]
  EXPECT_EQ(ops::select(yt, 0, 2).sym_size(0), u0);
  EXPECT_EQ(ops::select(yt, 0, 2).storage_offset(), (u0 * 2));
  // SymInt arithmetic keeps the symbol: 2*u0 == u0 + u0.
  EXPECT_EQ(u0 * 2, u0 + u0);
  EXPECT_EQ((u0 * 2).str(), "2*u0");
  EXPECT_EQ(sym::shapeStr(y.sizes()), "[u0, 3]");
}

TEST_F(SymbolicSizes, AnUnprovableEqualityIsADataDependentError) {
  const Tensor a = nz(ops::ones({8}));
  const Tensor b = nz(ops::ones({8}));  // u1: another symbol
  EXPECT_THAT(errorOf([&] { ops::add(a, b); }),
              AllOf(HasSubstr("data-dependent"), HasSubstr("u0 == u1"), HasSubstr("u0 in [0, 8]")));
  EXPECT_THAT(errorOf([&] { ops::add(a, ops::ones({5, 3})); }), AllOf(HasSubstr("data-dependent"), HasSubstr("u0 == 5")));
  EXPECT_THAT(errorOf([&] { ops::matmul(ops::t(a), ops::ones({4, 2})); }), HasSubstr("data-dependent"));
  EXPECT_THAT(errorOf([&] { ops::select(a, 0, 2); }), HasSubstr("data-dependent"));
  // A range that decides it is no error: u0 in [0, 8] is never 9.
  EXPECT_THAT(errorOf([&] { ops::add(a, ops::ones({9, 3})); }),
              AllOf(HasSubstr("must match"), ::testing::Not(HasSubstr("data-dependent"))));
}

TEST(SymInt, ArithmeticRangesAndDecisions) {
  const SymInt u = sym::newSymbol("s_a", 2, 10);
  const SymInt v = sym::newSymbol("s_b", 0);
  EXPECT_TRUE(u.is_symbolic());
  EXPECT_EQ((u * 3 + 1).str(), "3*s_a + 1");
  EXPECT_EQ((u * 3 + 1).range().min, 7);
  EXPECT_EQ((u * 3 + 1).range().max, 31);
  EXPECT_EQ((u * v).range().max, sym::kInf);
  EXPECT_EQ(u - u, 0);
  EXPECT_FALSE(sym::eq(u, 1, "test"));  // [2, 10] is never 1
  EXPECT_TRUE(sym::lt(u, 11, "test"));
  EXPECT_THAT(errorOf([&] { sym::eq(u, 5, "a test"); }), AllOf(HasSubstr("data-dependent"), HasSubstr("s_a in [2, 10]")));
  EXPECT_EQ(sym::newSymbol("s_c", 4, 4), 4);  // a one-value range is that value
  EXPECT_THAT(errorOf([] { sym::newSymbol("bad", -1); }), HasSubstr("min must be >= 0"));
  EXPECT_THAT(errorOf([] { sym::newSymbol("bad", 5, 2); }), HasSubstr("max (2) must be >= min (5)"));
  EXPECT_THAT(errorOf([&] { (void)u.expect_int(); }), HasSubstr("symbolic size s_a"));
  // Only a tensor without data may have symbolic sizes; raw arithmetic is caught.
  EXPECT_THAT(errorOf([&] { empty({u, 2}); }), AllOf(HasSubstr("symbolic sizes [s_a, 2]"), HasSubstr("cpu")));
  EXPECT_TRUE(empty({u, 2}, kMeta).is_meta());
  EXPECT_THAT(errorOf([&] { empty({static_cast<int64_t>(u) + 1, 2}, kMeta); }), HasSubstr("negative size"));
  // The sizes beside a symbolic one are still checked.
  const std::vector<int64_t> s2{u, 2}, bad_st{1, -4}, s_neg{u, -3}, st{3, 1};
  EXPECT_THAT(errorOf([&] { empty_strided(s2, bad_st, kMeta); }), HasSubstr("negative stride"));
  EXPECT_THAT(errorOf([&] { empty_strided(s_neg, st, kMeta); }), HasSubstr("negative size"));
}

// SymInt's comparisons decide by range, or say they cannot: never a comparison of
// two encodings (a symbol is a negative int64_t inside).
TEST(SymInt, ComparisonsDecideByRangeOrSayTheyDependOnData) {
  const SymInt u = sym::newSymbol("s_cmp", 2, 10);
  EXPECT_TRUE(u >= 0);
  EXPECT_TRUE(u > 1);
  EXPECT_TRUE(u < 11);
  EXPECT_TRUE(u <= 10);
  EXPECT_TRUE(u != 1);
  EXPECT_FALSE(u == 11);
  EXPECT_TRUE(u == u);
  EXPECT_TRUE(u * 2 == u + u);
  EXPECT_TRUE(0 < u);
  EXPECT_THAT(errorOf([&] { (void)(u == 5); }), AllOf(HasSubstr("data-dependent"), HasSubstr("s_cmp in [2, 10]")));
  EXPECT_THAT(errorOf([&] { (void)(u < 5); }), HasSubstr("data-dependent"));
  EXPECT_THAT(errorOf([&] { (void)(u >= 3); }), HasSubstr("data-dependent"));
  // Concrete SymInts compare as integers.
  EXPECT_TRUE(SymInt(3) < SymInt(4));
  EXPECT_TRUE(SymInt(-1) < 0);
}

TEST_F(SymbolicSizes, NarrowAndExpandDecideTheirBoundsByRange) {
  const Tensor y = nz(ops::ones({8}));  // [u0, 3], u0 in [0, 8]
  const SymInt u0 = y.sym_size(0);
  // expand: a 1 broadcasts to u0; u0 stays u0; u0 against 5 cannot be decided.
  const Tensor col = ops::narrow(y, 1, 0, 1);  // [u0, 1]
  EXPECT_EQ(col.sym_size(0), u0);
  EXPECT_EQ(col.size(1), 1);
  const Tensor e = ops::expand(col, {u0, 4});
  EXPECT_EQ(e.sym_size(0), u0);
  EXPECT_EQ(e.size(1), 4);
  EXPECT_EQ(e.stride(1), 0);
  EXPECT_EQ(ops::expand(y, {2, -1, 3}).sym_size(1), u0);
  EXPECT_EQ(ops::expand(ops::ones({1, 3}), {u0, 3}).sym_size(0), u0);
  EXPECT_THAT(errorOf([&] { ops::expand(y, {5, 3}); }), AllOf(HasSubstr("data-dependent"), HasSubstr("u0")));
  EXPECT_THAT(errorOf([&] { ops::expand(y, {9, 3}); }), HasSubstr("must match the existing size (u0)"));
  // narrow over the symbolic dim: a start and length the range allows.
  EXPECT_EQ(ops::narrow(y, 0, 0, u0).sym_size(0), u0);
  const Tensor tail = ops::narrow(y, 0, 0, 0);
  EXPECT_EQ(tail.size(0), 0);
  EXPECT_THAT(errorOf([&] { ops::narrow(y, 0, 0, 3); }), HasSubstr("data-dependent"));  // is u0 >= 3?
  EXPECT_THAT(errorOf([&] { ops::narrow(y, 0, 0, 9); }), HasSubstr("exceeds dimension size (u0)"));
  EXPECT_THAT(errorOf([&] { ops::narrow(y, 0, -1, 1); }), HasSubstr("must not be negative"));
  // And the tensor prints as PyTorch prints a fake tensor.
  EXPECT_EQ(y.str(), "FakeTensor(..., size=(u0, 3))");
  EXPECT_EQ(ops::empty({2}, ScalarType::Half, Device(DeviceType::CUDA, 0)).str(),
            "FakeTensor(..., size=(2,), device='cuda:0', dtype=float16)");
}

}  // namespace
}  // namespace strata
