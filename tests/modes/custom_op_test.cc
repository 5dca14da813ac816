// custom_op: the seeds' numpy_sin (default and cpu kernels), numpy_sin_inplace
// (mutates_args), bar(device) (a factory with device_types="cpu"), the schema from
// fn's type and the caller's names, mutates_args checks, register_kernel /
// register_fake / register_vmap / set_kernel_enabled, and the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../dispatch/test_util.h"
#include "strata/dispatcher.h"
#include "strata/modes/custom_op.h"
#include "strata/modes/fake.h"
#include "strata/modes/vmap.h"
#include "strata/ops.h"
#include "strata/plugin.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using modes::custom_op;
using modes::MutatesArgs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using strata::testing::errorOf;

Tensor sinOf(const Tensor& x) {
  std::vector<float> v = x.to(ScalarType::Float).to_vector<float>();
  for (float& e : v) e = std::sin(e);
  return from_vector(v, std::vector<int64_t>(x.sizes().begin(), x.sizes().end()));
}

TEST(CustomOp, TheSeedsNumpySinWithADefaultKernelAndACpuKernel) {
  int default_calls = 0, cpu_calls = 0;
  auto numpy_sin = custom_op("cop_sin::numpy_sin", [&](const Tensor& x) { ++default_calls; return sinOf(x); },
                             {"x"}, {});
  EXPECT_EQ(numpy_sin.schema().str(), "cop_sin::numpy_sin(Tensor x) -> Tensor");
  const Tensor x = from_vector<float>({0.0f, 1.0f, 2.0f});
  EXPECT_TRUE(ops::allclose(numpy_sin(x), ops::sin(x)));
  EXPECT_EQ(default_calls, 1);
  // Opaque: a default (CompositeExplicitAutograd) kernel, no CompositeImplicitAutograd.
  const auto regs = Dispatcher::singleton().registrations(parseOperatorName("cop_sin::numpy_sin"));
  bool has_default = false;
  for (const auto& r : regs) {
    EXPECT_NE(r.key, DispatchKey::CompositeImplicitAutograd);
    has_default |= r.key == DispatchKey::CompositeExplicitAutograd;
  }
  EXPECT_TRUE(has_default);
  numpy_sin.register_kernel({"cpu"}, [&](const Tensor& x) { ++cpu_calls; return sinOf(x); });
  EXPECT_TRUE(ops::allclose(numpy_sin(x), ops::sin(x)));
  EXPECT_EQ(cpu_calls, 1);
  {
    auto off = numpy_sin.set_kernel_enabled("cpu", false);  // back to the default kernel
    numpy_sin(x);
    EXPECT_EQ(default_calls, 2);
  }
  numpy_sin(x);
  EXPECT_EQ(cpu_calls, 2);
  // Only cpu: a cpu-only custom op (numpy_sin_cpu) has no kernel elsewhere.
  auto sin_cpu = custom_op("cop_sin::numpy_sin_cpu", [](const Tensor& x) { return sinOf(x); }, {"x"}, {}, {"cpu"});
  EXPECT_THAT(errorOf([&] { sin_cpu(empty({3}, kMeta)); }), HasSubstr("no kernel for dispatch key Meta"));
  // Made with device types, it has no default kernel to fall to: a disabled cpu has no
  // kernel, and the error names the switch (the README says where PyTorch differs).
  {
    auto off = sin_cpu.set_kernel_enabled("cpu", false);
    EXPECT_THAT(errorOf([&] { sin_cpu(x); }), HasSubstr("its CPU kernel is disabled (set_kernel_enabled)"));
  }
  EXPECT_TRUE(ops::allclose(sin_cpu(x), ops::sin(x)));
}

TEST(CustomOp, TagsAreKeptOnTheOperator) {
  auto f = custom_op("cop_tags::f", [](const Tensor& x) { return x.clone(); }, {"x"}, {}, {}, "",
                     {Tag::pt2_compliant_tag, Tag::needs_fixed_stride_order});
  EXPECT_TRUE(f.op().hasTag(Tag::pt2_compliant_tag));
  EXPECT_TRUE(f.op().hasTag(Tag::needs_fixed_stride_order));
  EXPECT_FALSE(f.op().hasTag(Tag::inplace_view));
  EXPECT_EQ(f.op().aliasAnalysis(), AliasAnalysisKind::FROM_SCHEMA);
  EXPECT_THAT(Dispatcher::singleton().dump(parseOperatorName("cop_tags::f")),
              HasSubstr("tags: needs_fixed_stride_order, pt2_compliant_tag"));
  auto g = custom_op("cop_tags::g", [](const Tensor& x) { return x.clone(); }, {"x"}, {});
  EXPECT_TRUE(g.op().tags().empty());
}

TEST(CustomOp, TheSeedsNumpySinInplaceMutatesItsArgument) {
  auto sin_ = custom_op("cop_inplace::numpy_sin_inplace", [](Tensor& x) { x.copy_(sinOf(x)); }, {"x"}, {"x"}, {"cpu"});
  EXPECT_EQ(sin_.schema().str(), "cop_inplace::numpy_sin_inplace(Tensor(a!) x) -> ()");
  Tensor x = from_vector<float>({0.5f, 1.5f});
  const Tensor expected = ops::sin(x);
  sin_(x);
  EXPECT_TRUE(ops::allclose(x, expected));
  // "unknown": every tensor argument is taken as mutated.
  auto unk = custom_op("cop_inplace::unk", [](const Tensor& a, const Tensor& b, double) { return ops::add(a, b); },
                       {"a", "b", "c"}, MutatesArgs::unknown());
  EXPECT_EQ(unk.schema().str(), "cop_inplace::unk(Tensor(a!) a, Tensor(b!) b, float c) -> Tensor");
  auto unk2 = custom_op(
      "cop_inplace::unk2",
      [](const std::optional<Tensor>& a, const std::vector<Tensor>& b) { return a ? a->clone() : b.at(0).clone(); },
      {"a", "b"}, MutatesArgs::unknown());
  EXPECT_EQ(unk2.schema().str(), "cop_inplace::unk2(Tensor(a!)? a, Tensor(b!)[] b) -> Tensor");
  const Tensor t = from_vector<float>({1.0f});
  const uint32_t v = t._version();
  EXPECT_TRUE(ops::allclose(unk2(std::nullopt, {t}), t));
  EXPECT_EQ(t._version(), v + 1);  // taken as written, so bumped
  // Named: a Tensor[] or Tensor? has no mutable C++ form, so the name says it.
  auto named = custom_op(
      "cop_inplace::zero_all", [](const std::vector<Tensor>& xs) { for (const Tensor& x : xs) x.zero_(); }, {"xs"},
      {"xs"});
  EXPECT_EQ(named.schema().str(), "cop_inplace::zero_all(Tensor(a!)[] xs) -> ()");
  const Tensor u = from_vector<float>({3.0f});
  named({u});
  EXPECT_EQ(u.to_vector<float>(), (std::vector<float>{0.0f}));
}

TEST(CustomOp, TheSeedsBarFactoryDispatchesOnItsDevice) {
  auto bar = custom_op("cop_bar::bar", [](Device) { return ones({3}); }, {"device"}, {}, {"cpu"});
  EXPECT_EQ(bar.schema().str(), "cop_bar::bar(Device device) -> Tensor");
  EXPECT_EQ(bar(kCPU).to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(CustomOp, ASchemaGivenReplacesTheInference) {
  auto f = custom_op("cop_schema::f", [](const Tensor& x, int64_t n) { return ops::mul(x, Scalar(n)); }, {}, {}, {},
                     "(Tensor input, int times=2) -> Tensor");
  EXPECT_EQ(f.schema().str(), "cop_schema::f(Tensor input, int times=2) -> Tensor");
  Stack s{IValue(from_vector<float>({1.0f}))};
  f.op().callBoxed(s);
  EXPECT_EQ(s.at(0).toTensor().to_vector<float>(), (std::vector<float>{2.0f}));
}

TEST(CustomOp, RegisterFakeAndRegisterVmapWorkOnTheOp) {
  auto lin = custom_op("cop_layers::scale", [](const Tensor& x, double s) { return ops::mul(x, Scalar(s)); },
                       {"x", "s"}, {});
  lin.register_fake([](const Tensor& x, double) { return ops::empty_like(x); });
  {
    auto mode = std::make_shared<modes::FakeTensorMode>();
    modes::ModeGuard guard(mode);
    const Tensor y = lin(ops::ones({4, 2}), 3.0);
    EXPECT_TRUE(modes::is_fake(y));
    EXPECT_EQ(y.size(0), 4);
  }
  // A custom op may replace its own fake impl, and its rules.
  lin.register_fake([](const Tensor& x, double) { return ops::sum(x); });
  lin.register_vmap([](const modes::VmapInfo&, const modes::InDims&, Stack&) -> modes::VmapResult {
    ADD_FAILURE() << "replaced";
    return {};
  });
  int rule_calls = 0;
  lin.register_vmap([&](const modes::VmapInfo&, const modes::InDims& in_dims, Stack& args) {
    ++rule_calls;
    const Tensor x = args[0].toTensor();
    return modes::VmapResult{Stack{IValue(ops::mul(x, Scalar(args[1].toDouble())))}, {in_dims[0]}};
  });
  const Tensor b = from_vector<float>({1, 2, 3, 4}, std::vector<int64_t>{2, 2});
  const Tensor r = modes::vmap([&](const Tensor& x) { return lin(x, 2.0); })(b);
  EXPECT_EQ(rule_calls, 1);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
}

TEST(CustomOp, ErrorsNameTheOpAndTheReason) {
  auto id = [](const Tensor& x) { return x.clone(); };
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::f", id, {}, {}); }),
              AllOf(HasSubstr("custom_op(cop_err::f)"), HasSubstr("1 argument(s) but 0 name(s)")));
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::f", id, {"1x"}, {}); }), HasSubstr("'1x' is not an identifier"));
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::f", id, {"x"}, {"y"}); }),
              HasSubstr("mutates_args names 'y', which is not an argument"));
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::f", id, {"x"}, {"x"}); }),
              AllOf(HasSubstr("mutates_args names 'x'"), HasSubstr("take it as Tensor&")));
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::g", [](Tensor& x) { return x; }, {"x"}, {}); }),
              AllOf(HasSubstr("custom_op(cop_err::g)"), HasSubstr("mutates_args does not name it")));
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::nodev", [](int64_t n) { return ones({n}); }, {"n"}, {}, {"cpu"}); }),
              AllOf(HasSubstr("custom_op(cop_err::nodev): it takes no tensor"), HasSubstr("needs a Device argument")));
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("cop_err::nodev")).has_value());
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::f", id, {"x"}, {}, {"tpu"}); }),
              AllOf(HasSubstr("custom_op(cop_err::f)"), HasSubstr("unknown device type 'tpu'")));
  EXPECT_THAT(errorOf([&] { (void)custom_op("noseparator", id, {"x"}, {}); }), HasSubstr("noseparator"));
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::f", id, {}, {}, {}, "Tensor x -> Tensor"); }),
              AllOf(HasSubstr("cop_err::f"), HasSubstr("invalid schema")));
  auto first = custom_op("cop_err::twice", id, {"x"}, {});
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_err::twice", id, {"x"}, {}); }),
              HasSubstr("cop_err::twice"));
  EXPECT_THAT(errorOf([&] { first.register_kernel({"gpu"}, id); }), HasSubstr("unknown device type 'gpu'"));
  // Nothing half-made stays behind: the refused defs left no operator.
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("cop_err::f")).has_value());
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("cop_err::g")).has_value());
}

TEST(CustomOp, EverythingGoesWithTheDef) {
  {
    auto op = custom_op("cop_raii::f", [](const Tensor& x) { return x.clone(); }, {"x"}, {});
    op.register_fake([](const Tensor& x) { return ops::empty_like(x); });
    EXPECT_TRUE(Dispatcher::singleton().findOp(parseOperatorName("cop_raii::f")).has_value());
  }
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("cop_raii::f")).has_value());
}

// A custom op that writes an argument bumps its version counter on every call, as
// PyTorch's custom_op does, whether or not anything requires grad: a tensor saved for
// backward and then written is caught at backward, never a silent wrong gradient.
TEST(CustomOp, AWrittenArgumentsVersionIsBumpedOnEveryCall) {
  auto sin_ = custom_op("cop_version::sin_", [](Tensor& x) {
    float* p = x.data_ptr<float>();  // writes through the pointer: only the op knows
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = std::sin(p[i]);
  }, {"x"}, {"x"}, {"cpu"});
  Tensor x = ops::full({3}, 2.0);
  const uint32_t before = x._version();
  sin_(x);
  EXPECT_EQ(x._version(), before + 1);
  const Tensor w = ops::ones({3}).set_requires_grad(true);
  const Tensor y = ops::mul(w, x);  // saves x for w's gradient
  sin_(x);
  EXPECT_THAT(errorOf([&] { ops::sum(y).backward(); }), HasSubstr("modified by an inplace operation"));
  // register_kernel's kernel bumps too.
  sin_.register_kernel({"cpu"}, [](Tensor& t) { t.data_ptr<float>()[0] = 0; });
  const uint32_t v = x._version();
  sin_(x);
  EXPECT_EQ(x._version(), v + 1);
}

// A mutating op with no results needs no fake impl of its own: it gets one that does
// nothing (PyTorch's trivial fake impl), so it runs under FakeTensorMode; a
// register_fake replaces it.
TEST(CustomOp, AMutatingOpWithNoResultsHasATrivialFakeImpl) {
  auto sin_ = custom_op("cop_trivial::sin_", [](Tensor& x) { x.copy_(sinOf(x)); }, {"x"}, {"x"}, {"cpu"});
  {
    auto mode = std::make_shared<modes::FakeTensorMode>();
    modes::ModeGuard guard(mode);
    Tensor f = ops::ones({4});
    ASSERT_TRUE(modes::is_fake(f));
    sin_(f);
    EXPECT_EQ(f.size(0), 4);
  }
  int calls = 0;
  sin_.register_fake([&](Tensor&) { ++calls; });
  {
    auto mode = std::make_shared<modes::FakeTensorMode>();
    modes::ModeGuard guard(mode);
    Tensor f = ops::ones({4});
    sin_(f);
  }
  EXPECT_EQ(calls, 1);
  // A bare register_fake replaces the generated one too, without allow_override.
  auto cos_ = custom_op("cop_trivial::cos_", [](Tensor& x) { x.copy_(ops::cos(x)); }, {"x"}, {"x"}, {"cpu"});
  int bare = 0;
  auto h = modes::register_fake("cop_trivial::cos_", [&](Tensor&) { ++bare; });
  {
    auto mode = std::make_shared<modes::FakeTensorMode>();
    modes::ModeGuard guard(mode);
    Tensor f = ops::ones({2});
    cos_(f);
  }
  EXPECT_EQ(bare, 1);
  // An op that returns something gets none: its outputs' metadata is the author's.
  auto g = custom_op("cop_trivial::g", [](Tensor& x) { return x.clone(); }, {"x"}, {"x"}, {"cpu"});
  auto mode = std::make_shared<modes::FakeTensorMode>();
  modes::ModeGuard guard(mode);
  Tensor f = ops::ones({4});
  EXPECT_THAT(errorOf([&] { g(f); }), AllOf(HasSubstr("cop_trivial::g has no fake implementation")));
}

// Kernels custom_op took before it wrapped written arguments still compile and run: a
// mutable lambda (its state kept across calls), and one taking the DispatchKeySet.
TEST(CustomOp, MutableAndKeySetKernelsAreTakenAsBefore) {
  int n = 0;
  auto count_ = custom_op("cop_kinds::count_", [n](Tensor& x) mutable { x.fill_(static_cast<double>(++n)); }, {"x"},
                          {"x"}, {"cpu"});
  Tensor x = ops::zeros({1});
  const uint32_t v = x._version();
  count_(x);
  count_(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2.0f}));
  EXPECT_GE(x._version(), v + 2);
  auto keyed = custom_op("cop_kinds::keyed", [](DispatchKeySet ks, const Tensor& t) {
    return ks.has(DispatchKey::CPU) ? t.clone() : Tensor();
  }, {"t"}, {}, {"cpu"});
  EXPECT_TRUE(keyed(ops::ones({1})).defined());
  // A kernel taking the DispatchKeySet bumps what it writes, as the plain form does.
  auto keyed_ = custom_op("cop_kinds::keyed_", [](DispatchKeySet, Tensor& t) {
    t.data_ptr<float>()[0] = 5.0f;  // through the pointer: only the op knows
  }, {"t"}, {"t"}, {"cpu"});
  Tensor y = ops::zeros({1});
  const uint32_t vy = y._version();
  keyed_(y);
  EXPECT_EQ(y._version(), vy + 1);
}

// Note [A custom op's outputs are new tensors]: an output may not be an input, share
// an input's storage, or share another output's; every kernel is checked on every
// call, and a view op is left alone.
TEST(CustomOp, AnOutputMayNotBeAnInputOrShareStorageWithOne) {
  auto same = custom_op("cop_alias::same", [](const Tensor& x) { return x; }, {"x"}, {});
  const Tensor x = ops::ones({2, 2});
  EXPECT_THAT(errorOf([&] { same(x); }),
              AllOf(HasSubstr("cop_alias::same (its default kernel): output 0 is argument 'x'"),
                    HasSubstr("must not be one of its inputs"), HasSubstr("Return a clone instead (e.g. x.clone())")));
  // A view, from a device kernel; a later register_kernel is checked as well.
  auto view = custom_op("cop_alias::view", [](const Tensor& a, const Tensor&) { return a.view({4}); }, {"a", "b"}, {},
                        {"cpu"});
  EXPECT_THAT(errorOf([&] { view(x, x); }),
              HasSubstr("cop_alias::view (its CPU kernel): output 0 shares its storage with argument 'a'"));
  view.register_kernel({"cpu"}, [](const Tensor&, const Tensor& b) { return ops::transpose(b, 0, 1); });
  EXPECT_THAT(errorOf([&] { view(x, ops::zeros({2, 2})); }), HasSubstr("output 0 shares its storage with argument 'b'"));
  view.register_kernel({"cpu"}, [](const Tensor& a, const Tensor&) { return a.clone(); });
  EXPECT_TRUE(view(x, x).equal(x));  // one tensor given as two arguments is no output's alias
  // Two outputs that share a storage; an element of a list output; list and Tensor? arguments.
  auto pair = custom_op("cop_alias::pair", [](const Tensor& a) {
    Tensor y = a.clone();
    return std::make_tuple(y, ops::select(y, 0, 0));
  }, {"a"}, {});
  EXPECT_THAT(errorOf([&] { pair(x); }),
              AllOf(HasSubstr("output 1 shares its storage with output 0"), HasSubstr("Return a clone of one of them")));
  auto list = custom_op("cop_alias::list", [](const std::optional<Tensor>& a, const std::vector<Tensor>& bs) {
    return std::vector<Tensor>{bs.at(0).clone(), a ? *a : bs.back()};
  }, {"a", "bs"}, {});
  EXPECT_THAT(errorOf([&] { list(x, {ops::zeros({1})}); }), HasSubstr("element 1 of output 0 is argument 'a'"));
  EXPECT_THAT(errorOf([&] { list(std::nullopt, {ops::zeros({1}), x}); }),
              HasSubstr("element 1 of output 0 is element 1 of argument 'bs'"));
  auto opt_list = custom_op("cop_alias::opt_list", [](const std::optional<std::vector<Tensor>>& xs) {
    return xs ? xs->at(0) : ops::zeros({1});
  }, {"xs"}, {});
  EXPECT_THAT(errorOf([&] { opt_list(std::vector<Tensor>{x}); }), HasSubstr("output 0 is element 0 of argument 'xs'"));
  EXPECT_EQ(opt_list(std::nullopt).numel(), 1);
  // An op that writes its input may not return it either (PyTorch refuses it too), not
  // even with a schema that says so; one that takes the DispatchKeySet is checked too.
  auto write_ = custom_op("cop_alias::write_", [](Tensor& a) { a.fill_(2.0); return a; }, {"a"}, {"a"});
  Tensor w = ops::zeros({1});
  EXPECT_THAT(errorOf([&] { write_(w); }),
              AllOf(HasSubstr("output 0 is argument 'a'"), HasSubstr("or return nothing: the op writes it in place")));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{2.0f}));  // the write happened; the output is refused
  auto write_declared = custom_op("cop_alias::write_declared", [](Tensor& a) { a.fill_(3.0); return a; }, {"a"},
                                  {"a"}, {}, "(Tensor(a!) a) -> Tensor(a!)");
  EXPECT_THAT(errorOf([&] { write_declared(w); }), HasSubstr("output 0 is argument 'a'"));
  auto keyed = custom_op("cop_alias::keyed", [](DispatchKeySet, const Tensor& t) { return t; }, {"t"}, {}, {"cpu"});
  EXPECT_THAT(errorOf([&] { keyed(x); }), HasSubstr("cop_alias::keyed (its CPU kernel): output 0 is argument 't'"));
  // A view op, by a schema given by hand, returns its views, even beside a new tensor.
  auto declared = custom_op("cop_alias::declared", [](const Tensor& a) { return a.view({4}); }, {}, {}, {},
                            "(Tensor(a) x) -> Tensor(a)");
  EXPECT_TRUE(declared(x).is_alias_of(x));
  auto views = custom_op("cop_alias::views", [](const Tensor& a) {
    return std::make_tuple(a.clone(), ops::select(a, 0, 0));
  }, {}, {}, {}, "(Tensor(a) x) -> (Tensor, Tensor(a))");
  EXPECT_TRUE(std::get<1>(views(x)).is_alias_of(x));
  // A view op that also writes an argument: its written one is still bumped, and its
  // view is still returned unchecked.
  auto view_and_write = custom_op("cop_alias::view_and_write", [](Tensor& out, const Tensor& a) {
    out.data_ptr<float>()[0] = 1.0f;  // through the pointer: only the op's declared write bumps
    return a.view({4});
  }, {"out", "a"}, {"out"}, {}, "(Tensor(a!) out, Tensor(b) a) -> Tensor(b)");
  Tensor o = ops::zeros({1});
  const uint32_t o_version = o._version();
  EXPECT_TRUE(view_and_write(o, x).is_alias_of(x));
  EXPECT_EQ(o._version(), o_version + 1);
  EXPECT_EQ(o.to_vector<float>(), (std::vector<float>{1.0f}));
  // Outputs that are not tensors, and undefined ones, are not checked.
  auto none = custom_op("cop_alias::none", [](const Tensor& a) { return std::make_tuple(Tensor(), Tensor(), a.numel()); },
                        {"a"}, {});
  EXPECT_EQ(std::get<2>(none(x)), 4);
}

// Registering on the def custom_op just returned (chaining, as in Python) would register
// on an op removed at the end of the statement: it does not compile.
template <typename Def>
concept CanRegisterFakeOn = requires(Def&& d) {
  std::forward<Def>(d).register_fake([](const Tensor& x) { return ops::empty_like(x); });
};
template <typename Def>
concept CanRegisterAutogradOn = requires(Def&& d) { std::forward<Def>(d).register_autograd(modes::BackwardFn{}); };
using SinDef = modes::TypedCustomOpDef<Tensor(const Tensor&)>;
static_assert(CanRegisterFakeOn<SinDef&> && CanRegisterAutogradOn<SinDef&>);
static_assert(!CanRegisterFakeOn<SinDef&&> && !CanRegisterAutogradOn<SinDef&&>);
static_assert(!CanRegisterFakeOn<SinDef>);

// A tensor taken by value may be freed inside fn (the call held its only reference),
// and its memory reused for the output: that is a new tensor, not the argument.
TEST(CustomOp, AnArgumentTakenByValueAndFreedIsNoOutputsAlias) {
  auto by_value = custom_op("cop_byvalue::f", [](Tensor t) {
    t = ops::add(t, t);  // the argument's last reference goes here
    return ops::mul(t, t);
  }, {"t"}, {});
  for (int i = 0; i < 8; ++i) EXPECT_EQ(by_value(ops::ones({2})).to_vector<float>(), (std::vector<float>{4.0f, 4.0f}));
  auto lists = custom_op("cop_byvalue::g", [](std::vector<Tensor> ts) {
    Tensor a = ops::add(ts.at(0), ts.at(0));
    ts.clear();
    return std::make_tuple(ops::mul(a, a), ops::ones({1}));
  }, {"ts"}, {});
  for (int i = 0; i < 8; ++i) EXPECT_EQ(std::get<0>(lists({ops::ones({1})})).to_vector<float>(), (std::vector<float>{4.0f}));
  // Still caught when fn returns it.
  auto back = custom_op("cop_byvalue::back", [](Tensor t) { return t; }, {"t"}, {});
  EXPECT_THAT(errorOf([&] { back(ops::ones({1})); }), HasSubstr("output 0 is argument 't'"));
}

// A schema given must agree with mutates_args, and a custom op's tensors are positional.
TEST(CustomOp, ASchemaGivenMustAgreeWithMutatesArgs) {
  auto fill = [](const Tensor& x) { x.fill_(1.0); };
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_agree::a", fill, {"x"}, {}, {}, "(Tensor(a!) x) -> ()"); }),
              AllOf(HasSubstr("custom_op(cop_agree::a)"), HasSubstr("writes {x} (Tensor(a!)), but mutates_args names {}")));
  EXPECT_THAT(errorOf([&] { (void)custom_op("cop_agree::b", [](Tensor& x) { x.fill_(1.0); }, {"x"}, {"x"}, {}, "(Tensor x) -> ()"); }),
              HasSubstr("writes {} (Tensor(a!)), but mutates_args names {x}"));
  EXPECT_THAT(errorOf([&] {
                (void)custom_op("cop_agree::c", [](const Tensor& x) { return x.clone(); }, {"x"}, {"nope"}, {},
                          "(Tensor x) -> Tensor");
              }),
              HasSubstr("mutates_args names 'nope', which is not an argument of the schema"));
  EXPECT_THAT(errorOf([&] {
                (void)custom_op("cop_agree::kw", [](const Tensor& x, const Tensor& y) { return ops::mul(x, y); }, {}, {}, {},
                          "(Tensor x, *, Tensor y) -> Tensor");
              }),
              HasSubstr("argument 'y' (Tensor) is keyword-only; a custom op's tensor arguments must be positional"));
  // Agreeing ones are made, "unknown" included; nothing refused stayed behind.
  auto ok = custom_op("cop_agree::ok", [](Tensor& x) { x.fill_(1.0); }, {"x"}, {"x"}, {}, "(Tensor(a!) x) -> ()");
  auto unk = custom_op("cop_agree::unk", [](Tensor& x) { x.fill_(1.0); }, {"x"}, MutatesArgs::unknown(), {},
                       "(Tensor(a!) x) -> ()");
  for (const char* n : {"cop_agree::a", "cop_agree::b", "cop_agree::c", "cop_agree::kw"}) {
    EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName(n)).has_value()) << n;
  }
}

// Note [Static registrations in bundles]: custom_op at namespace scope in a bundle
// runs while the host captures. It must not throw (that would end the process): its
// def is refused and recorded, and calling it says why.
TEST(CustomOp, MadeWhileAHostLoadsABundleIsRefusedWithoutThrowing) {
  StaticRegistrations got;
  CaptureStaticRegistrations capture(got);
  auto op = custom_op("cop_captured::f", [](const Tensor& x) { return x.clone(); }, {"x"}, {});
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("cop_captured::f")).has_value());
  ASSERT_FALSE(got.refused.empty());
  EXPECT_THAT(got.refused.front(), HasSubstr("cop_captured"));
  EXPECT_THAT(errorOf([&] { op(ops::ones({2})); }),
              AllOf(HasSubstr("custom_op(cop_captured::f) was made by a static initializer"),
                    HasSubstr("its definition was refused")));
}

}  // namespace
}  // namespace strata
