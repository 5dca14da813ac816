// The dispatcher's rules, one test (or a few) per rule. Each test uses its own
// namespace, and its Library objects die with it, so tests do not see each other.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"
#include "strata/plugin.h"
#include "test_util.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using strata::testing::errorOf;

using Unary = Tensor(const Tensor&);
OperatorHandle op(const std::string& name, const std::string& overload = "") {
  return Dispatcher::singleton().findSchemaOrThrow(name, overload);
}
// A tensor whose single value tells which kernel made it.
Tensor tagged(double v) { return full({1}, v); }
double tagOf(const Tensor& t) { return t.item().toDouble(); }
// Why op's table slot for key holds what it holds ("kernel", "fallthrough", ...).
std::string slotSource(const std::string& name, DispatchKey key) {
  for (const SlotInfo& s : Dispatcher::singleton().computedTable(parseOperatorName(name))) {
    if (s.key == key) return s.source;
  }
  ADD_FAILURE() << name << " has no table slot for " << toString(key);
  return "";
}

// ---------------------------------------------------------------------------
// Keys.

TEST(DispatchKeys, AliasKeysAreNotRuntimeKeysAndMapToTheirSets) {
  EXPECT_TRUE(DispatchKeySet(DispatchKey::CompositeImplicitAutograd).empty());
  EXPECT_EQ(runtimeKeySetFor(DispatchKey::CompositeExplicitAutograd), kBackendKeys);
  EXPECT_EQ(runtimeKeySetFor(DispatchKey::CompositeImplicitAutograd), kBackendKeys | kAutogradKeys);
  EXPECT_EQ(runtimeKeySetFor(DispatchKey::Autograd), kAutogradKeys);
  EXPECT_EQ(runtimeKeySetFor(DispatchKey::CPU), DispatchKeySet(DispatchKey::CPU));
  EXPECT_TRUE(isAliasKey(DispatchKey::Autograd));
  EXPECT_FALSE(isRuntimeKey(DispatchKey::Autograd));
}

TEST(DispatchKeys, ParsesDeviceTypesDefaultAndKeyNames) {
  EXPECT_EQ(parseDispatchKey("cpu"), DispatchKey::CPU);
  EXPECT_EQ(parseDispatchKey("cuda"), DispatchKey::CUDA);
  EXPECT_EQ(parseDispatchKey("meta"), DispatchKey::Meta);
  EXPECT_EQ(parseDispatchKey("privateuse1"), DispatchKey::PrivateUse1);
  EXPECT_EQ(parseDispatchKey("default"), DispatchKey::CompositeExplicitAutograd);
  EXPECT_EQ(parseDispatchKey("AutogradCPU"), DispatchKey::AutogradCPU);
  EXPECT_EQ(parseDispatchKey("CompositeImplicitAutograd"), DispatchKey::CompositeImplicitAutograd);
  EXPECT_THAT(errorOf([] { parseDispatchKey("gpu"); }), AllOf(HasSubstr("'gpu'"), HasSubstr("cpu, cuda, meta")));
  // A layer's key of a device type, as the admin commands accept it.
  EXPECT_EQ(parseDispatchKey("autocast:cpu"), DispatchKey::AutocastCPU);
  EXPECT_EQ(parseDispatchKey("autocast:cuda"), DispatchKey::AutocastCUDA);
  EXPECT_EQ(parseDispatchKey("autocast:privateuse1"), DispatchKey::AutocastPrivateUse1);
  EXPECT_EQ(parseDispatchKey("autograd:cpu"), DispatchKey::AutogradCPU);
  EXPECT_THAT(errorOf([] { parseDispatchKey("autocast:meta"); }),
              AllOf(HasSubstr("'autocast:meta'"), HasSubstr("autocast:DEVICE (cpu, cuda, privateuse1)")));
  EXPECT_THAT(errorOf([] { parseDispatchKey("vmap:cpu"); }), HasSubstr("'vmap:cpu'"));
}

TEST(DispatchKeys, OrderIsPyTorchs) {
  const DispatchKeySet all = kAllRuntimeKeys;
  std::vector<DispatchKey> order;
  for (DispatchKeySet rest = all; !rest.empty(); rest = rest.remove(rest.highestPriorityKey())) {
    order.push_back(rest.highestPriorityKey());
  }
  using K = DispatchKey;
  EXPECT_EQ(order, (std::vector<K>{K::Batched, K::AutocastPrivateUse1, K::AutocastCUDA, K::AutocastCPU, K::AutogradCUDA, K::AutogradCPU,
                                    K::AutogradMeta, K::Mode, K::Fake, K::Meta, K::PrivateUse1, K::CUDA, K::CPU}));
  EXPECT_EQ(keysBelow(K::AutogradCPU) & all,
            (DispatchKeySet{K::AutogradMeta, K::Mode, K::Fake, K::Meta, K::PrivateUse1, K::CUDA, K::CPU}));
  EXPECT_EQ(keysAbove(K::AutocastCPU) & all, (DispatchKeySet{K::Batched, K::AutocastPrivateUse1, K::AutocastCUDA}));
}

TEST(DispatchKeys, TensorsContributeTheirKeys) {
  Tensor x = ones({2});
  EXPECT_EQ(x.key_set(), DispatchKeySet(DispatchKey::CPU));
  x.set_requires_grad(true);
  EXPECT_EQ(x.key_set(), (DispatchKeySet{DispatchKey::CPU, DispatchKey::AutogradCPU}));
  EXPECT_EQ(empty({2}, kMeta).key_set(), DispatchKeySet(DispatchKey::Meta));
}

TEST(LocalDispatchKeySet, GuardsIncludeAndExcludeForAScopeAndNest) {
  const auto before = tls_local_dispatch_key_set();
  {
    IncludeDispatchKeyGuard inc(DispatchKey::AutocastCPU);
    EXPECT_TRUE(tls_local_dispatch_key_set().included.has(DispatchKey::AutocastCPU));
    {
      ExcludeDispatchKeyGuard exc(DispatchKey::AutocastCPU);
      EXPECT_TRUE(tls_local_dispatch_key_set().excluded.has(DispatchKey::AutocastCPU));
      IncludeDispatchKeyGuard inc2(DispatchKey::Mode);
      EXPECT_TRUE(tls_local_dispatch_key_set().included.has(DispatchKey::Mode));
    }
    EXPECT_FALSE(tls_local_dispatch_key_set().excluded.has(DispatchKey::AutocastCPU));
    EXPECT_FALSE(tls_local_dispatch_key_set().included.has(DispatchKey::Mode));
  }
  EXPECT_EQ(tls_local_dispatch_key_set().included, before.included);
  EXPECT_EQ(tls_local_dispatch_key_set().excluded, before.excluded);
}

// ---------------------------------------------------------------------------
// The seeds' examples.

Tensor sin_cpu(const Tensor& x) {
  std::vector<float> v = x.contiguous().to_vector<float>();
  for (float& e : v) e = std::sin(e);
  return from_vector(v, std::vector<int64_t>(x.sizes().begin(), x.sizes().end()));
}

TEST(Seeds, SinDefinedThenImplementedForCpu) {
  Library def(Library::DEF, "seed_sin");
  def.def("sin(Tensor x) -> Tensor");
  Library impl(Library::IMPL, "seed_sin", DispatchKey::CPU);
  impl.impl("sin", &sin_cpu);
  const Tensor x = from_vector<float>({0.0f, 1.0f, 2.0f});
  const Tensor y = op("seed_sin::sin").typed<Unary>().call(x);
  EXPECT_TRUE(y.equal(from_vector<float>({std::sin(0.0f), std::sin(1.0f), std::sin(2.0f)})));
}

TEST(Seeds, DefaultKernelZerosCpuKernelOnesAndTheCpuKernelDisabledInAScope) {
  Library lib(Library::DEF, "seed_f");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor& x) { return zeros(x.sizes()); }, "default");
  lib.impl("f", [](const Tensor& x) { return ones(x.sizes()); }, "cpu");
  const auto f = op("seed_f::f").typed<Unary>();
  const Tensor x = ones({3});
  EXPECT_TRUE(f.call(x).equal(ones({3})));
  {
    KernelEnabledScope off("seed_f::f", "cpu", false);
    EXPECT_TRUE(f.call(x).equal(zeros({3})));
    EXPECT_FALSE(is_kernel_enabled("seed_f::f", "cpu"));
  }
  EXPECT_TRUE(f.call(x).equal(ones({3})));
  EXPECT_TRUE(is_kernel_enabled("seed_f::f", "cpu"));
}

TEST(Seeds, AWildcardFallbackHandlesEveryOpGenerically) {
  // A PrivateUse1 "device" whose fallback runs any op by moving its tensors to CPU.
  int calls = 0;
  Library fb(Library::IMPL, "_", DispatchKey::PrivateUse1);
  fb.fallback(CppFunction::makeFromBoxedFunctor([&calls](const OperatorHandle& o, DispatchKeySet ks, Stack& s) {
    ++calls;
    o.redispatchBoxed(ks & keysBelow(DispatchKey::PrivateUse1), s);
  }));
  Library a(Library::DEF, "seed_fb_a");
  a.def("f(Tensor x) -> Tensor");
  a.impl("f", [](const Tensor& x) { return x; }, DispatchKey::CPU);
  Library b(Library::DEF, "seed_fb_b");
  b.def("g(Tensor x, int n) -> int");
  b.impl("g", [](const Tensor&, int64_t n) { return n * 2; }, DispatchKey::CPU);
  IncludeDispatchKeyGuard on(DispatchKey::PrivateUse1);
  Stack s1{ones({1})};
  op("seed_fb_a::f").callBoxed(s1);
  Stack s2{ones({1}), int64_t{21}};
  op("seed_fb_b::g").callBoxed(s2);
  EXPECT_EQ(s2.at(0).toInt(), 42);
  EXPECT_EQ(op("seed_fb_b::g").typed<int64_t(const Tensor&, int64_t)>().call(ones({1}), 5), 10);
  EXPECT_EQ(calls, 3);
  // A kernel of the op's own at the key outranks the fallback.
  a.impl("f", [](const Tensor&) { return tagged(9); }, DispatchKey::PrivateUse1);
  EXPECT_EQ(tagOf(op("seed_fb_a::f").typed<Unary>().call(ones({1}))), 9);
  EXPECT_EQ(calls, 3);
}

// ---------------------------------------------------------------------------
// Precedence.

struct PrecedenceLib {
  Library lib{Library::FRAGMENT, "prec"};
  explicit PrecedenceLib(const char* name) { lib.def(std::string(name) + "(Tensor x) -> Tensor"); }
  template <typename K>
  void at(const char* name, K key, double tag) {
    lib.impl(name, [tag](const Tensor&) { return tagged(tag); }, key);
  }
};

TEST(Precedence, DirectKernelBeatsDefaultAndDefaultFillsOtherBackends) {
  PrecedenceLib p("direct");
  p.at("direct", DispatchKey::CompositeExplicitAutograd, 1);
  p.at("direct", DispatchKey::CPU, 2);
  const auto f = op("prec::direct").typed<Unary>();
  EXPECT_EQ(tagOf(f.call(ones({1}))), 2);
  const Tensor m = f.call(empty({1}, kMeta));  // Meta: the default kernel
  EXPECT_EQ(tagOf(m), 1);
}

TEST(Precedence, CompositeExplicitBeatsCompositeImplicitOnBackends) {
  PrecedenceLib p("cea_cia");
  p.at("cea_cia", DispatchKey::CompositeImplicitAutograd, 1);
  p.at("cea_cia", DispatchKey::CompositeExplicitAutograd, 2);
  EXPECT_EQ(tagOf(op("prec::cea_cia").typed<Unary>().call(ones({1}))), 2);
  // The autograd slot does not take the implicit kernel: a default kernel exists,
  // so autograd's fallback steps down to the backend.
  EXPECT_EQ(slotSource("prec::cea_cia", DispatchKey::AutogradCPU), "backend fallback");
  EXPECT_EQ(slotSource("prec::cea_cia", DispatchKey::CPU), "default kernel");
}

TEST(Precedence, CompositeImplicitFillsBackendAndAutogradWhenNothingElse) {
  PrecedenceLib p("cia_only");
  p.at("cia_only", DispatchKey::CompositeImplicitAutograd, 7);
  const auto f = op("prec::cia_only").typed<Unary>();
  Tensor g = ones({1});
  g.set_requires_grad(true);
  EXPECT_EQ(tagOf(f.call(g)), 7);
  for (DispatchKey k : {DispatchKey::AutogradCPU, DispatchKey::CPU, DispatchKey::Meta, DispatchKey::Undefined}) {
    EXPECT_EQ(slotSource("prec::cia_only", k), "composite implicit kernel") << toString(k);
  }
  EXPECT_EQ(slotSource("prec::cia_only", DispatchKey::Batched), "missing");  // not in the alias's keys
}

TEST(Precedence, AutogradSlotSkipsCompositeImplicitWhenTheBackendHasAKernel) {
  PrecedenceLib p("cia_backend");
  p.at("cia_backend", DispatchKey::CompositeImplicitAutograd, 1);
  p.at("cia_backend", DispatchKey::CPU, 2);
  Tensor g = ones({1});
  g.set_requires_grad(true);
  // AutogradCPU steps below autograd (the builtin fallback), CPU has its own kernel.
  EXPECT_EQ(tagOf(op("prec::cia_backend").typed<Unary>().call(g)), 2);
  // AutogradCUDA: CUDA has no kernel, so the implicit kernel fills it.
  EXPECT_EQ(slotSource("prec::cia_backend", DispatchKey::AutogradCPU), "backend fallback");
  EXPECT_EQ(slotSource("prec::cia_backend", DispatchKey::AutogradCUDA), "composite implicit kernel");
}

TEST(Precedence, AutogradAliasFillsEveryAutogradKey) {
  PrecedenceLib p("ag");
  p.at("ag", DispatchKey::CPU, 1);
  p.lib.impl("ag", [](DispatchKeySet ks, const Tensor& x) {
    // An autograd kernel that redispatches below itself and marks the result.
    static const auto self = op("prec::ag").typed<Unary>();
    Tensor r = self.redispatch(ks & keysBelow(DispatchKey::AutogradCPU), x);
    return full({1}, tagOf(r) + 10);
  }, DispatchKey::Autograd);
  Tensor g = ones({1});
  g.set_requires_grad(true);
  EXPECT_EQ(tagOf(op("prec::ag").typed<Unary>().call(g)), 11);
  EXPECT_EQ(tagOf(op("prec::ag").typed<Unary>().call(ones({1}))), 1);  // no autograd key: CPU directly
}

TEST(Precedence, BackendFallbackThenMissingWithAClearError) {
  PrecedenceLib p("missing");
  p.at("missing", DispatchKey::CUDA, 1);
  const std::string msg = errorOf([] { op("prec::missing").typed<Unary>().call(ones({1})); });
  EXPECT_THAT(msg, AllOf(HasSubstr("prec::missing"), HasSubstr("no kernel for dispatch key CPU"),
                         HasSubstr("DispatchKeySet(CPU)"), HasSubstr("CUDA [unboxed, owner user"),
                         HasSubstr("dispatcher_test.cc")));
}

TEST(Precedence, AnOpWithoutTensorArgumentsUsesItsCompositeKernelOrFails) {
  Library lib(Library::DEF, "notensor");
  lib.def("seven() -> int");
  lib.def("eight() -> int");
  lib.impl("seven", [] { return int64_t{7}; }, "default");
  EXPECT_EQ(op("notensor::seven").typed<int64_t()>().call(), 7);
  Stack s;
  op("notensor::seven").callBoxed(s);
  EXPECT_EQ(s.at(0).toInt(), 7);
  lib.impl("eight", [] { return int64_t{8}; }, DispatchKey::CPU);
  EXPECT_THAT(errorOf([] { op("notensor::eight").typed<int64_t()>().call(); }),
              AllOf(HasSubstr("notensor::eight"), HasSubstr("empty key set"), HasSubstr("no tensor arguments")));
}

// Note [Dispatching on a Device argument]: a factory with no tensor argument
// dispatches on its Device (PyTorch's BackendSelect), unboxed and boxed.
TEST(Precedence, AnOpWithoutTensorsButWithADeviceDispatchesOnTheDevice) {
  Library lib(Library::DEF, "devsel");
  lib.def("bar(Device device) -> Tensor");
  lib.def("baz(int n, *, Device? device=None) -> Tensor");
  lib.impl("bar", [](Device) { return ones({3}); }, "cpu");
  lib.impl("baz", [](int64_t n, std::optional<Device>) { return zeros({n}); }, "cpu");
  lib.impl("baz", [](int64_t n, std::optional<Device>) { return ones({n}); }, "default");
  EXPECT_EQ(op("devsel::bar").typed<Tensor(Device)>().call(kCPU).numel(), 3);
  Stack s{IValue(kCPU)};
  op("devsel::bar").callBoxed(s);
  EXPECT_EQ(s.at(0).toTensor().numel(), 3);
  // A device with no kernel is the usual error, naming the key.
  EXPECT_THAT(errorOf([] { op("devsel::bar").typed<Tensor(Device)>().call(kMeta); }),
              AllOf(HasSubstr("devsel::bar"), HasSubstr("no kernel for dispatch key Meta")));
  // Device? given: the device's kernel; not given: the composite ("default") kernel.
  const auto baz = op("devsel::baz").typed<Tensor(int64_t, std::optional<Device>)>();
  EXPECT_EQ(baz.call(2, kCPU).to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_EQ(baz.call(2, std::nullopt).to_vector<float>(), (std::vector<float>{1, 1}));
  const Explanation ex = explain(op("devsel::bar"), Stack{IValue(kCPU)});
  ASSERT_EQ(ex.arguments.size(), 1u);
  EXPECT_EQ(ex.arguments[0].name, "device");
  EXPECT_EQ(ex.arguments[0].keys, DispatchKeySet(DispatchKey::CPU));
}

// ---------------------------------------------------------------------------
// Fallthrough, fallbacks, redispatch, TLS.

TEST(Fallthrough, AFallthroughKernelSkipsItsKeyAndIsMaskedOut) {
  Library lib(Library::DEF, "ft");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor&) { return tagged(1); }, DispatchKey::CPU);
  lib.impl("f", CppFunction::makeFallthrough(), DispatchKey::PrivateUse1);
  const auto f = op("ft::f");
  EXPECT_FALSE(f.nonFallthroughKeys().has(DispatchKey::PrivateUse1));
  EXPECT_FALSE(f.nonFallthroughKeys().has(DispatchKey::AutocastCPU));  // the builtin fallthrough fallback
  // Autograd's builtin fallback is boxed (it steps below autograd): only tensors that
  // require grad carry the key, so plain calls never reach it.
  EXPECT_TRUE(f.nonFallthroughKeys().has(DispatchKey::AutogradCPU));
  EXPECT_TRUE(f.nonFallthroughKeys().has(DispatchKey::CPU));
  IncludeDispatchKeyGuard g(DispatchKey::PrivateUse1);
  EXPECT_EQ(tagOf(f.typed<Unary>().call(ones({1}))), 1);
}

TEST(Fallback, OnlyOnePerKeyOnlyBoxedOnlyFromUnderscoreImpl) {
  Library fb(Library::IMPL, "_", DispatchKey::Batched);
  fb.fallback(CppFunction::makeFallthrough());
  Library fb2(Library::IMPL, "_", DispatchKey::Batched);
  EXPECT_THAT(errorOf([&] { fb2.fallback(CppFunction::makeFallthrough()); }),
              AllOf(HasSubstr("multiple backend fallbacks"), HasSubstr("Batched")));
  Library fb3(Library::IMPL, "_", DispatchKey::PrivateUse1);
  EXPECT_THAT(errorOf([&] { fb3.fallback([](const Tensor& x) { return x; }); }), HasSubstr("boxed kernel or a fallthrough"));
  Library notwild(Library::IMPL, "somens", DispatchKey::PrivateUse1);
  EXPECT_THAT(errorOf([&] { notwild.fallback(CppFunction::makeFallthrough()); }),
              HasSubstr("IMPL library of namespace _"));
}

TEST(Redispatch, TheMaskDecidesWhichLayerRuns) {
  Library lib(Library::DEF, "redis");
  lib.def("f(Tensor x) -> Tensor");
  std::vector<std::string> seen;
  lib.impl("f", [&seen](DispatchKeySet ks, const Tensor& x) {
    seen.push_back("PrivateUse1");
    return op("redis::f").typed<Unary>().redispatch(ks & keysBelow(DispatchKey::PrivateUse1), x);
  }, DispatchKey::PrivateUse1);
  lib.impl("f", [&seen](DispatchKeySet ks, const Tensor& x) {
    seen.push_back("CPU " + ks.str());
    return x;
  }, DispatchKey::CPU);
  IncludeDispatchKeyGuard g(DispatchKey::PrivateUse1);
  op("redis::f").typed<Unary>().call(ones({1}));
  EXPECT_EQ(seen, (std::vector<std::string>{"PrivateUse1", "CPU DispatchKeySet(CPU)"}));
}

TEST(TlsSets, IncludedKeysDispatchAndExcludedKeysAreSkipped) {
  Library lib(Library::DEF, "tls");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor&) { return tagged(1); }, DispatchKey::CPU);
  lib.impl("f", [](const Tensor&) { return tagged(2); }, DispatchKey::AutocastCPU);
  const auto f = op("tls::f").typed<Unary>();
  EXPECT_EQ(tagOf(f.call(ones({1}))), 1);
  IncludeDispatchKeyGuard on(DispatchKey::AutocastCPU);
  EXPECT_EQ(tagOf(f.call(ones({1}))), 2);
  ExcludeDispatchKeyGuard off(DispatchKey::AutocastCPU);
  EXPECT_EQ(tagOf(f.call(ones({1}))), 1);
}

TEST(ArgumentKeys, OptionalTensorAndTensorListArgumentsContribute) {
  Library lib(Library::DEF, "argkeys");
  lib.def("opt(Tensor? x) -> int");
  lib.def("lst(Tensor[] xs) -> int");
  lib.impl("opt", [](const std::optional<Tensor>&) { return int64_t{1}; }, DispatchKey::CPU);
  lib.impl("opt", [](const std::optional<Tensor>&) { return int64_t{2}; }, DispatchKey::Meta);
  lib.impl("opt", [](const std::optional<Tensor>&) { return int64_t{3}; }, "default");
  lib.impl("lst", [](const std::vector<Tensor>&) { return int64_t{1}; }, DispatchKey::CPU);
  lib.impl("lst", [](const std::vector<Tensor>&) { return int64_t{2}; }, DispatchKey::Meta);
  const auto o = op("argkeys::opt").typed<int64_t(const std::optional<Tensor>&)>();
  EXPECT_EQ(o.call(ones({1})), 1);
  EXPECT_EQ(o.call(empty({1}, kMeta)), 2);
  EXPECT_EQ(o.call(std::nullopt), 3);  // no tensor: the default kernel
  const auto l = op("argkeys::lst").typed<int64_t(const std::vector<Tensor>&)>();
  EXPECT_EQ(l.call({ones({1}), empty({1}, kMeta)}), 2);  // Meta outranks CPU
  Stack s{std::vector<Tensor>{ones({1})}};
  op("argkeys::lst").callBoxed(s);
  EXPECT_EQ(s[0].toInt(), 1);
}

// ---------------------------------------------------------------------------
// Boxed <-> unboxed, all four directions.

TEST(Boxing, UnboxedKernelCalledUnboxedAndBoxed) {
  Library lib(Library::DEF, "box1");
  lib.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  lib.impl("muladd", [](const Tensor& a, const Tensor& b, double c) { return full({1}, tagOf(a) * tagOf(b) + c); },
           DispatchKey::CPU);
  const auto h = op("box1::muladd");
  EXPECT_EQ(tagOf(h.typed<Tensor(const Tensor&, const Tensor&, double)>().call(tagged(2), tagged(3), 1.0)), 7);
  Stack s{tagged(2), tagged(3), 1.5};
  h.callBoxed(s);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(tagOf(s[0].toTensor()), 7.5);
}

TEST(Boxing, BoxedKernelCalledBoxedAndUnboxed) {
  Library lib(Library::DEF, "box2");
  lib.def("pair(Tensor a, int n) -> (Tensor, int)");
  lib.impl("pair", CppFunction::makeFromBoxedFunctor([](const OperatorHandle&, DispatchKeySet, Stack& s) {
    const int64_t n = pop(s).toInt();
    Tensor a = pop(s).toTensor();
    push(s, full({1}, tagOf(a) + static_cast<double>(n)), n * 2);
  }), DispatchKey::CPU);
  const auto h = op("box2::pair");
  Stack s{tagged(1), int64_t{4}};
  h.callBoxed(s);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(tagOf(s[0].toTensor()), 5);
  EXPECT_EQ(s[1].toInt(), 8);
  auto [t, n] = h.typed<std::tuple<Tensor, int64_t>(const Tensor&, int64_t)>().call(tagged(1), 4);
  EXPECT_EQ(tagOf(t), 5);
  EXPECT_EQ(n, 8);
}

TEST(Boxing, StatefulFunctorsAndFunctionPointers) {
  struct Counter {
    std::shared_ptr<int> n = std::make_shared<int>(0);
    int64_t operator()(const Tensor&) const { return ++*n; }
  };
  Counter c;
  Library lib(Library::DEF, "box3");
  lib.def("count(Tensor x) -> int");
  lib.impl("count", c, DispatchKey::CPU);
  const auto h = op("box3::count").typed<int64_t(const Tensor&)>();
  EXPECT_EQ(h.call(ones({1})), 1);
  EXPECT_EQ(h.call(ones({1})), 2);
  EXPECT_EQ(*c.n, 2);
}

// A boxed call of a typed kernel whose result borrows from its arguments (a span, a
// string_view): the result is boxed before the arguments are released (run under ASan
// in CI, where a use after free fails the test).
TEST(Boxing, AResultThatBorrowsFromTheArgumentsIsBoxedBeforeTheyGo) {
  Library lib(Library::DEF, "box5");
  lib.def("ints(Tensor x, int[] a) -> int[]");
  lib.impl("ints", [](const Tensor&, ArrayRef<int64_t> a) { return a; }, DispatchKey::CPU);
  lib.def("text(Tensor x, str s) -> str");
  lib.impl("text", [](const Tensor&, std::string_view s) { return s; }, DispatchKey::CPU);
  Stack s{ones({1}), std::vector<int64_t>{4, 5, 6}};
  op("box5::ints").callBoxed(s);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].toIntList(), (std::vector<int64_t>{4, 5, 6}));
  Stack t{ones({1}), std::string(40, 'x')};  // long enough to live on the heap
  op("box5::text").callBoxed(t);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].toStringRef(), std::string(40, 'x'));
}

TEST(Boxing, MutableTensorArgumentsAndReturnsThroughABoxedKernel) {
  Library lib(Library::DEF, "box4");
  lib.def("fill_(Tensor(a!) self, float v) -> Tensor(a!)");
  lib.impl("fill_", CppFunction::makeFromBoxedFunctor([](const OperatorHandle&, Stack& s) {
    const double v = pop(s).toDouble();
    const Tensor self = pop(s).toTensor();
    self.fill_(v);
    push(s, self);
  }), DispatchKey::CPU);
  Tensor x = zeros({2});
  Tensor& r = op("box4::fill_").typed<Tensor&(Tensor&, double)>().call(x, 3.0);
  EXPECT_EQ(&r, &x);
  EXPECT_TRUE(x.equal(full({2}, 3.0)));
}

// ---------------------------------------------------------------------------
// Signatures and argument checks.

TEST(Signatures, AnUnboxedKernelThatDoesNotMatchTheSchemaIsRefusedWithBothSignatures) {
  Library lib(Library::DEF, "sig");
  lib.def("foo(Tensor x, float y) -> Tensor");
  const std::string msg = errorOf([&] { lib.impl("foo", [](const Tensor& x, int64_t) { return x; }, DispatchKey::CPU); });
  EXPECT_THAT(msg, AllOf(HasSubstr("sig::foo"), HasSubstr("argument 'y' (position 1) is float"),
                         HasSubstr("sig::foo(Tensor x, float y) -> Tensor"), HasSubstr("(Tensor _0, int _1) -> Tensor")));
  EXPECT_THAT(errorOf([&] { lib.impl("foo", [](const Tensor& x) { return x; }, DispatchKey::CPU); }),
              HasSubstr("2 arguments, the C++ function 1"));
  EXPECT_THAT(errorOf([&] { lib.impl("foo", [](const Tensor&, double) { return int64_t{0}; }, DispatchKey::CPU); }),
              HasSubstr("return 0 is Tensor in the schema, int"));
  EXPECT_EQ(Dispatcher::singleton().registrations(parseOperatorName("sig::foo")).size(), 1u);  // only the def
}

TEST(Signatures, KernelsOfOneOpShareOneCppSignatureAndTypedCallsMustUseIt) {
  Library lib(Library::DEF, "sig2");
  lib.def("foo(Tensor x) -> Tensor");
  lib.impl("foo", [](const Tensor& x) { return x; }, DispatchKey::CPU);
  EXPECT_THAT(errorOf([&] { lib.impl("foo", [](Tensor x) { return x; }, DispatchKey::Meta); }),
              HasSubstr("mismatch in kernel C++ signatures"));
  EXPECT_THAT(errorOf([] { op("sig2::foo").typed<Tensor(Tensor)>(); }), HasSubstr("exact C++ signature"));
  EXPECT_THAT(errorOf([] { op("sig2::foo").typed<Tensor(const Tensor&, double)>(); }),
              HasSubstr("does not match the schema"));
}

// Note [Who keeps a typed signature]: a bundle's typed handles go with its
// registrations, so its next version may change the op's C++ signature; a typed
// handle made outside any bundle keeps the signature for the process's life.
TEST(Signatures, ABundlesTypedHandlesGoWithItsRegistrations) {
  {
    BundleRegistrar v1("sigbundle", "1.0.0");
    RegistrationOwnerGuard owner(v1.owner());
    Library& lib = v1.library(Library::DEF, "sig3");
    lib.def("foo(Tensor x, float y) -> Tensor");
    lib.impl("foo", [](const Tensor& x, double) { return x; }, DispatchKey::CPU);
    (void)op("sig3::foo").typed<Tensor(const Tensor&, double)>();
    v1.clear();
  }
  BundleRegistrar v2("sigbundle", "2.0.0");
  {
    RegistrationOwnerGuard owner(v2.owner());
    Library& lib = v2.library(Library::DEF, "sig3");
    lib.def("foo(Tensor x, int n) -> Tensor");
    EXPECT_NO_THROW(lib.impl("foo", [](const Tensor& x, int64_t) { return x; }, DispatchKey::CPU));
    EXPECT_NO_THROW((void)op("sig3::foo").typed<Tensor(const Tensor&, int64_t)>());
  }
  // A handle made by code outside the bundle ("user") keeps v2's signature after v2 goes.
  (void)op("sig3::foo").typed<Tensor(const Tensor&, int64_t)>();
  v2.clear();
  Library lib(Library::DEF, "sig3");
  lib.def("foo(Tensor x, float y) -> Tensor");
  EXPECT_THAT(errorOf([&] { lib.impl("foo", [](const Tensor& x, double) { return x; }, DispatchKey::CPU); }),
              AllOf(HasSubstr("mismatch in kernel C++ signatures"), HasSubstr("by 'user'")));
}

// A bundle loaded again fixes the typed signatures it fixed before (its statics may
// still hold the handles), and its load is refused when one no longer holds.
TEST(Signatures, ABundleLoadedAgainFixesItsTypedSignaturesAgain) {
  auto define = [](bool with_float) {
    auto lib = std::make_unique<Library>(Library::DEF, "sig4");
    if (with_float) {
      lib->def("f(Tensor x, float y) -> Tensor");
      lib->impl("f", [](const Tensor& x, double) { return x; }, DispatchKey::CPU);
    } else {
      lib->def("f(Tensor x, int y) -> Tensor");
      lib->impl("f", [](const Tensor& x, int64_t) { return x; }, DispatchKey::CPU);
    }
    return lib;
  };
  auto a = define(true);
  {
    BundleRegistrar b("sig4user", "1.0.0");
    RegistrationOwnerGuard owner(b.owner());
    (void)op("sig4::f").typed<Tensor(const Tensor&, double)>();
    b.clear();
  }
  a.reset();
  a = define(false);  // the definer changed the signature meanwhile
  EXPECT_THAT(errorOf([] { detail::refixTypedSignatures("sig4user@1.0.0"); }),
              AllOf(HasSubstr("sig4::f: sig4user@1.0.0 made a typed<"), HasSubstr("when it was loaded before")));
  a.reset();
  a = define(true);  // back: the bundle loads, and its signature holds again
  EXPECT_NO_THROW(detail::refixTypedSignatures("sig4user@1.0.0"));
  a.reset();
  Library other(Library::DEF, "sig4");
  other.def("f(Tensor x, int y) -> Tensor");
  EXPECT_THAT(errorOf([&] { other.impl("f", [](const Tensor& x, int64_t) { return x; }, DispatchKey::CPU); }),
              HasSubstr("by 'sig4user@1.0.0'"));
}

TEST(ArgumentChecks, BoxedCallsCheckCountAndTypesAndFillDefaults) {
  Library lib(Library::DEF, "mylib");
  lib.def("foo(Tensor a, Tensor b, float c, int d=3, *, str mode=\"x\") -> Tensor");
  lib.impl("foo", [](const Tensor& a, const Tensor&, double c, int64_t d, std::string_view mode) {
    return full({1}, tagOf(a) + c + static_cast<double>(d) + static_cast<double>(mode.size()));
  }, DispatchKey::CPU);
  const auto h = op("mylib::foo");
  Stack bad{tagged(1), tagged(1), tagged(1)};
  EXPECT_EQ(errorOf([&] { h.callBoxed(bad); }), "mylib::foo: argument 'c' (position 2) expects float, got Tensor");
  Stack few{tagged(1)};
  EXPECT_THAT(errorOf([&] { h.callBoxed(few); }), HasSubstr("missing argument 'b' (position 1)"));
  Stack many{tagged(1), tagged(1), 1.0, int64_t{1}, "m", 5.0};
  EXPECT_THAT(errorOf([&] { h.callBoxed(many); }), HasSubstr("expected at most 5 arguments, got 6"));
  Stack ok{tagged(1), tagged(1), int64_t{2}};  // an int where a float is expected is accepted
  h.callBoxed(ok);
  EXPECT_EQ(tagOf(ok.at(0).toTensor()), 1 + 2 + 3 + 1);
}

// PyTorch 2's SymFloat and SymBool are floats and bools on the stack, as SymInt is an
// int: a C++ kernel takes double and bool for them, and boxed values are checked so.
TEST(ArgumentChecks, SymFloatAndSymBoolTakeFloatsAndBools) {
  Library lib(Library::DEF, "symlib");
  lib.def("scale(Tensor a, SymFloat s, SymBool add_one=False, SymFloat[] extra=[]) -> Tensor");
  lib.impl("scale", [](const Tensor& a, double s, bool add_one, std::vector<double> extra) {
    double sum = 0;
    for (double e : extra) sum += e;
    return full({1}, tagOf(a) * s + (add_one ? 1 : 0) + sum);
  }, DispatchKey::CPU);
  const auto h = op("symlib::scale");
  Stack ok{tagged(2), int64_t{3}, true, std::vector<int64_t>{1, 2}};  // ints where SymFloats are expected
  h.callBoxed(ok);
  EXPECT_EQ(tagOf(ok.at(0).toTensor()), 2 * 3 + 1 + 3);
  Stack defaults{tagged(2), 0.5};
  h.callBoxed(defaults);
  EXPECT_EQ(tagOf(defaults.at(0).toTensor()), 1);
  Stack bad_bool{tagged(2), 1.0, int64_t{1}};
  EXPECT_EQ(errorOf([&] { h.callBoxed(bad_bool); }),
            "symlib::scale: argument 'add_one' (position 2) expects SymBool, got int");
  Stack bad_float{tagged(2), "x"};
  EXPECT_EQ(errorOf([&] { h.callBoxed(bad_float); }),
            "symlib::scale: argument 's' (position 1) expects SymFloat, got str");
  EXPECT_EQ(h.typed<Tensor(const Tensor&, double, bool, std::vector<double>)>().call(tagged(1), 2.0, false, {}).sizes()[0],
            1);
  // A kernel whose C++ types are not the schema's is refused, naming both.
  EXPECT_THAT(errorOf([&] { lib.impl("scale", [](const Tensor& a, int64_t, bool, std::vector<double>) { return a; },
                                     DispatchKey::Meta); }),
              HasSubstr("argument 's' (position 1) is SymFloat in the schema, int in the C++ function"));
}

// ---------------------------------------------------------------------------
// Libraries.

TEST(Libraries, PyTorchsMisusesAreErrors) {
  Library def(Library::DEF, "libk");
  EXPECT_THAT(errorOf([] { Library again(Library::DEF, "libk"); }),
              AllOf(HasSubstr("Only a single STRATA_LIBRARY"), HasSubstr("libk"), HasSubstr("dispatcher_test.cc")));
  def.def("f(Tensor x) -> Tensor");
  EXPECT_THAT(errorOf([&] { def.def("f(Tensor x) -> Tensor"); }), HasSubstr("multiple times"));
  Library impl(Library::IMPL, "libk", DispatchKey::CPU);
  EXPECT_THAT(errorOf([&] { impl.def("g(Tensor x) -> Tensor"); }), HasSubstr("Cannot define an operator inside"));
  EXPECT_THAT(errorOf([&] { def.def("other::g(Tensor x) -> Tensor"); }),
              HasSubstr("Explicitly provided namespace (other) in schema string"));
  EXPECT_THAT(errorOf([&] { impl.impl("other::f", [](const Tensor& x) { return x; }); }),
              HasSubstr("Explicitly provided namespace (other) in operator name"));
  EXPECT_THAT(errorOf([&] { impl.impl("f", [](const Tensor& x) { return x; }, DispatchKey::Meta); }),
              HasSubstr("Explicitly provided dispatch key (Meta) is inconsistent"));
  EXPECT_THAT(errorOf([] { Library w(Library::DEF, "_"); }), HasSubstr("wildcard namespace _"));
  EXPECT_THAT(errorOf([] { Library w(Library::FRAGMENT, "_"); }), HasSubstr("wildcard namespace _"));
  // prim is reserved for definitions, as in torch.library; an IMPL library may add kernels.
  EXPECT_THAT(errorOf([] { Library w(Library::DEF, "prim"); }), HasSubstr("prim is a reserved namespace"));
  EXPECT_THAT(errorOf([] { Library w(Library::FRAGMENT, "prim"); }), HasSubstr("prim is a reserved namespace"));
  EXPECT_NO_THROW(Library(Library::IMPL, "prim", DispatchKey::CPU));
  EXPECT_THAT(errorOf([] { Library w(Library::DEF, "bad-ns"); }), HasSubstr("invalid library namespace"));
  EXPECT_THAT(errorOf([&] { def.def("h(Tensor x) -> Tensor!!"); }), HasSubstr("invalid schema"));
}

TEST(Libraries, FragmentsMayBeManyAndDefWithAFunctionInfersTheSchema) {
  Library a(Library::FRAGMENT, "frag");
  Library b(Library::FRAGMENT, "frag");
  a.def("twice", [](const Tensor& x, int64_t n) { return full({1}, tagOf(x) * static_cast<double>(n)); });
  EXPECT_EQ(op("frag::twice").schema().str(), "frag::twice(Tensor _0, int _1) -> Tensor");
  EXPECT_EQ(tagOf(op("frag::twice").typed<Tensor(const Tensor&, int64_t)>().call(tagged(3), 2)), 6);
  b.def("thrice(Tensor x) -> Tensor", [](const Tensor& x) { return full({1}, tagOf(x) * 3); });
  EXPECT_EQ(tagOf(op("frag::thrice").typed<Unary>().call(tagged(2))), 6);
  // def(name, fn) registers a CompositeImplicitAutograd kernel, as in PyTorch.
  const auto regs = Dispatcher::singleton().registrations(parseOperatorName("frag::thrice"));
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_EQ(regs[1].key, DispatchKey::CompositeImplicitAutograd);
  // A refused impl undoes its def.
  EXPECT_THAT(errorOf([&] { a.def("bad(Tensor x) -> int", [](const Tensor& x) { return x; }); }),
              HasSubstr("does not match"));
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("frag::bad")).has_value());
}

TEST(Libraries, AnotherOwnersKernelNeedsAllowOverrideAndRemovalRestoresTheOldOne) {
  std::optional<Library> first;
  {
    RegistrationOwnerGuard owner("bundle_a@1.0");
    first.emplace(Library::DEF, "ovr");
    first->def("f(Tensor x) -> Tensor");
    first->impl("f", [](const Tensor&) { return tagged(1); }, DispatchKey::CPU);
  }
  const auto f = op("ovr::f").typed<Unary>();
  RegistrationOwnerGuard owner("bundle_b@2.0");
  Library second(Library::IMPL, "ovr", DispatchKey::CPU);
  EXPECT_THAT(errorOf([&] { second.impl("f", [](const Tensor&) { return tagged(2); }); }),
              AllOf(HasSubstr("already registered by 'bundle_a@1.0'"), HasSubstr("allow_override")));
  second.impl("f", [](const Tensor&) { return tagged(2); }, DispatchKey::CPU, ImplOptions{.allow_override = true});
  EXPECT_EQ(tagOf(f.call(ones({1}))), 2);
  // The same owner's second kernel at one key needs allow_override too.
  EXPECT_THAT(errorOf([&] { second.impl("f", [](const Tensor&) { return tagged(3); }); }),
              AllOf(HasSubstr("already registered by 'bundle_b@2.0'"), HasSubstr("allow_override")));
  second.impl("f", [](const Tensor&) { return tagged(3); }, DispatchKey::CPU, ImplOptions{.allow_override = true});
  EXPECT_EQ(tagOf(f.call(ones({1}))), 3);
  second.reset();
  EXPECT_EQ(tagOf(f.call(ones({1}))), 1);  // the stack unwinds to the first owner's kernel
}

TEST(Libraries, RegistrationsRecordOwnerAndDebugAndDieWithTheLibrary) {
  {
    RegistrationOwnerGuard owner("bundle@1.2.3");
    Library lib(Library::DEF, "owned");
    lib.def("f(Tensor x) -> Tensor");
    lib.impl("f", [](const Tensor& x) { return x; }, DispatchKey::CPU);
    const auto regs = Dispatcher::singleton().registrations(parseOperatorName("owned::f"));
    ASSERT_EQ(regs.size(), 2u);
    for (const auto& r : regs) {
      EXPECT_EQ(r.owner, "bundle@1.2.3");
      EXPECT_THAT(r.debug, AllOf(HasSubstr("dispatcher_test.cc:"), HasSubstr("registered at")));
    }
    EXPECT_EQ(lib.numRegistrations(), 3u);  // the DEF library claim, the def, the impl
  }
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("owned::f")).has_value());
  Library again(Library::DEF, "owned");  // the namespace is free again
}

// A library's registrations go as one batch (Note [Registration batches]); when
// another thread holds a batch, they still go, one at a time, and nothing throws.
TEST(Libraries, ALibraryOfManyKernelsGoesAndStillGoesWhileAnotherThreadBatches) {
  Library def(Library::DEF, "manyk");
  constexpr int kOps = 40;
  for (int i = 0; i < kOps; ++i) def.def("f" + std::to_string(i) + "(Tensor x) -> Tensor");
  auto noCpuKernel = [](int i) {
    return !Dispatcher::singleton().registrations(parseOperatorName("manyk::f" + std::to_string(i))).empty() &&
           errorOf([i] { op("manyk::f" + std::to_string(i)).typed<Unary>().call(ones({1})); }).find("no kernel") !=
               std::string::npos;
  };
  auto fill = [](Library& impl) {
    for (int i = 0; i < kOps; ++i) impl.impl("f" + std::to_string(i), [](const Tensor& x) { return x; });
  };
  {
    Library impl(Library::IMPL, "manyk", DispatchKey::CPU);
    fill(impl);
    EXPECT_TRUE(op("manyk::f7").typed<Unary>().call(ones({1})).defined());
  }
  for (int i = 0; i < kOps; ++i) EXPECT_TRUE(noCpuKernel(i)) << i;

  auto impl = std::make_unique<Library>(Library::IMPL, "manyk", DispatchKey::CPU);
  fill(*impl);
  std::atomic<bool> holding{false}, release{false};
  std::thread other([&] {
    RegistrationBatch batch;
    holding = true;
    while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  while (!holding.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  // A batch on this thread waits for the other's to end, as for a lock.
  std::atomic<bool> opened{false};
  std::thread waiter([&] {
    RegistrationBatch b;
    opened = true;
  });
  impl.reset();  // opens no batch: each removal is published at once, nothing throws
  for (int i = 0; i < kOps; ++i) EXPECT_TRUE(noCpuKernel(i)) << i;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(opened.load());
  release = true;
  other.join();
  waiter.join();
  EXPECT_TRUE(opened.load());
}

// While a library dies on one thread (here: stalled in a kernel's destructor, which
// runs when its grace period ends), another thread may open a registration batch:
// a library's removal holds none (Note [Deferred reclamation]).
TEST(Libraries, ADyingLibraryLeavesRegistrationBatchesToOtherThreads) {
  if (!detail::retiredKernelsAreFreed()) GTEST_SKIP() << "no membarrier here: retired kernels are kept";
  Library def(Library::DEF, "dying");
  def.def("f(Tensor x) -> Tensor");
  def.def("g(Tensor x) -> Tensor");
  struct Flags {
    std::atomic<bool> destroying{false}, batch_opened{false};
  };
  auto flags = std::make_shared<Flags>();
  struct Stall {
    std::shared_ptr<Flags> f;
    ~Stall() {
      if (!f) return;
      f->destroying = true;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!f->batch_opened.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  };
  auto impl = std::make_unique<Library>(Library::IMPL, "dying", DispatchKey::CPU);
  auto stall = std::make_shared<Stall>();
  stall->f = flags;
  impl->impl("f", [stall](const Tensor& x) { return x; });
  stall.reset();  // the kernel holds the last reference
  impl->impl("g", [](const Tensor& x) { return x; });
  std::string opened = "not tried";
  std::thread other([&] {
    while (!flags->destroying.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    opened = errorOf([] { RegistrationBatch b; });  // "" when it opened
    flags->batch_opened = true;
  });
  impl.reset();
  // The grace period ends inside reset() when no call is in flight; never hang if not.
  for (int i = 0; i < 5000 && !flags->batch_opened.load(); ++i) {
    Dispatcher::singleton().reclaimRetiredKernels();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  flags->destroying = true;
  other.join();
  EXPECT_EQ(opened, "");
  EXPECT_TRUE(flags->batch_opened.load());
}

// The schema inferred from a C++ signature is remembered per signature, never per
// operator: the same signature against another schema is still refused.
TEST(Signatures, OneSignatureIsCheckedAgainstEachOperatorsOwnSchema) {
  Library lib(Library::DEF, "sigcache");
  lib.def("a(Tensor x, float y) -> Tensor");
  lib.def("b(Tensor x, int y) -> Tensor");
  auto kernel = [](const Tensor& x, double) { return x; };
  lib.impl("a", kernel, DispatchKey::CPU);
  EXPECT_THAT(errorOf([&] { lib.impl("b", kernel, DispatchKey::CPU); }),
              AllOf(HasSubstr("sigcache::b"), HasSubstr("argument 'y' (position 1) is int")));
  lib.impl("a", kernel, DispatchKey::Meta);  // and the same one again is fine
}

// Tags and alias analysis: what a def says besides its schema.
TEST(Tags, ADefKeepsItsTagsAndAliasAnalysisAndDumpShowsThem) {
  Library lib(Library::DEF, "tagns");
  lib.def("plain(Tensor x) -> Tensor");
  lib.def("pw(Tensor x) -> Tensor", {Tag::pointwise, Tag::pt2_compliant_tag});
  lib.def(schema("pure(Tensor x) -> Tensor", AliasAnalysisKind::PURE_FUNCTION), {Tag::needs_fixed_stride_order});
  lib.def("inferred", [](const Tensor& x) { return x; });
  lib.def("inferred_mut", [](Tensor& x) { return x; });
  EXPECT_TRUE(op("tagns::plain").tags().empty());
  EXPECT_EQ(op("tagns::plain").aliasAnalysis(), AliasAnalysisKind::FROM_SCHEMA);
  EXPECT_TRUE(op("tagns::pw").hasTag(Tag::pointwise));
  EXPECT_TRUE(op("tagns::pw").hasTag(Tag::pt2_compliant_tag));
  EXPECT_FALSE(op("tagns::pw").hasTag(Tag::inplace_view));
  EXPECT_EQ(op("tagns::pw").tags().str(), "pointwise, pt2_compliant_tag");
  EXPECT_EQ(op("tagns::pure").aliasAnalysis(), AliasAnalysisKind::PURE_FUNCTION);
  EXPECT_TRUE(op("tagns::pure").hasTag(Tag::needs_fixed_stride_order));
  // An inferred schema cannot say what a result aliases: CONSERVATIVE, as PyTorch;
  // one with a Tensor& parameter is annotated (a!), and the annotation rules.
  EXPECT_EQ(op("tagns::inferred").aliasAnalysis(), AliasAnalysisKind::CONSERVATIVE);
  EXPECT_EQ(op("tagns::inferred_mut").aliasAnalysis(), AliasAnalysisKind::FROM_SCHEMA);
  const std::string d = dump("tagns::pw");
  EXPECT_THAT(d, HasSubstr("\ntags: pointwise, pt2_compliant_tag\n"));
  EXPECT_THAT(d, HasSubstr("\nalias analysis: FROM_SCHEMA\n"));
  EXPECT_THAT(dump("tagns::plain"), HasSubstr("\ntags: (none)\n"));
  EXPECT_THAT(dump("tagns::pure"), HasSubstr("\nalias analysis: PURE_FUNCTION\n"));
  // The tags go with the def: a new def of the name after the old one is gone has its own.
  lib.reset();
  Library again(Library::FRAGMENT, "tagns");
  again.def("pw(Tensor x) -> Tensor", {Tag::core});
  EXPECT_EQ(op("tagns::pw").tags().str(), "core");
}

TEST(Tags, NamesParseAsPyTorchSpellsThemAndUnknownOnesAreErrors) {
  EXPECT_EQ(parseTag("pt2_compliant_tag"), Tag::pt2_compliant_tag);
  EXPECT_EQ(parseTag("torch.Tag.inplace_view"), Tag::inplace_view);
  EXPECT_EQ(parseTag("at::Tag::data_dependent_output"), Tag::data_dependent_output);
  EXPECT_EQ(parseTag("needs_fixed_stride_order"), Tag::needs_fixed_stride_order);
  for (int i = 0; i < kNumTags; ++i) EXPECT_EQ(parseTag(toString(static_cast<Tag>(i))), static_cast<Tag>(i));
  EXPECT_THAT(errorOf([] { parseTag("pt2_compliant"); }),
              AllOf(HasSubstr("unknown operator tag 'pt2_compliant'"), HasSubstr("pt2_compliant_tag")));
  EXPECT_EQ(parseAliasAnalysisKind(""), AliasAnalysisKind::FROM_SCHEMA);
  EXPECT_EQ(parseAliasAnalysisKind("FROM_SCHEMA"), AliasAnalysisKind::FROM_SCHEMA);
  EXPECT_EQ(parseAliasAnalysisKind("CONSERVATIVE"), AliasAnalysisKind::CONSERVATIVE);
  EXPECT_EQ(parseAliasAnalysisKind("PURE_FUNCTION"), AliasAnalysisKind::PURE_FUNCTION);
  EXPECT_THAT(errorOf([] { parseAliasAnalysisKind("pure"); }),
              AllOf(HasSubstr("unknown alias analysis kind 'pure'"), HasSubstr("PURE_FUNCTION")));
}

TEST(Tags, AliasAnnotationsNeedFromSchemaAndARefusedDefLeavesNothing) {
  Library lib(Library::DEF, "aliasns");
  const size_t before = lib.numRegistrations();
  const std::string e = errorOf([&] {
    lib.def(schema("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)", AliasAnalysisKind::CONSERVATIVE));
  });
  EXPECT_THAT(e, AllOf(HasSubstr("aliasns::add_"), HasSubstr("aliasing information in the schema"),
                       HasSubstr("CONSERVATIVE"), HasSubstr("FROM_SCHEMA")));
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("aliasns::add_")).has_value());
  EXPECT_EQ(lib.numRegistrations(), before);
  EXPECT_THAT(errorOf([&] {
    lib.def(schema("view(Tensor(a) self) -> Tensor(a)", AliasAnalysisKind::PURE_FUNCTION));
  }), HasSubstr("PURE_FUNCTION"));
  lib.def(schema("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)", AliasAnalysisKind::FROM_SCHEMA));
  lib.def(schema("pure(Tensor self) -> Tensor", AliasAnalysisKind::PURE_FUNCTION));
  EXPECT_EQ(op("aliasns::pure").aliasAnalysis(), AliasAnalysisKind::PURE_FUNCTION);
}

TEST(Libraries, AnOperatorDisappearsWithItsLastDefAndImplAndStaleHandlesFailCleanly) {
  std::optional<Library> def(std::in_place, Library::DEF, "gone");
  def->def("f(Tensor x) -> Tensor");
  Library impl(Library::IMPL, "gone", DispatchKey::CPU);
  impl.impl("f", [](const Tensor& x) { return x; });
  const auto f = op("gone::f").typed<Unary>();
  def.reset();
  EXPECT_TRUE(Dispatcher::singleton().findOp(parseOperatorName("gone::f")).has_value());  // impl still there
  EXPECT_FALSE(Dispatcher::singleton().findSchema(parseOperatorName("gone::f")).has_value());
  impl.reset();
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("gone::f")).has_value());
  EXPECT_THAT(errorOf([&] { f.call(ones({1})); }), HasSubstr("was removed"));
}

TEST(Libraries, ImplBeforeDefIsAllowedAndCheckedWhenTheDefArrives) {
  Library impl(Library::IMPL, "late", DispatchKey::CPU);
  impl.impl("f", [](const Tensor& x) { return x; });
  EXPECT_THAT(errorOf([] { op("late::f"); }), HasSubstr("has kernels but no schema"));
  Library bad(Library::FRAGMENT, "late");
  EXPECT_THAT(errorOf([&] { bad.def("f(Tensor x, int n) -> Tensor"); }), HasSubstr("does not match"));
  bad.def("f(Tensor x) -> Tensor");
  EXPECT_EQ(op("late::f").typed<Unary>().call(tagged(4)).item().toDouble(), 4);
}

TEST(Libraries, AStaticLibraryBlockThatThrowsKeepsNothing) {
  const auto errors = detail::staticRegistrationErrors();
  bool found = false;
  for (const auto& e : errors) found = found || e.find("static_bad") != std::string::npos;
  EXPECT_TRUE(found);
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("static_bad::ok")).has_value());
}

// Note [Static registrations in bundles]: what a host sees while a bundle's library
// loads, here without a library: the same code paths, run under a capture.
void captured_block(Library& m) {
  m.def("f(Tensor x) -> Tensor");
  m.impl("f", [](const Tensor& x) { return x; }, "cpu");
}

TEST(Libraries, UnderACaptureBlocksAreDeferredAndOtherRegistrationsRefused) {
  StaticRegistrations got;
  {
    CaptureStaticRegistrations capture(got);
    detail::LibraryInit block(Library::DEF, &captured_block, "captured", std::nullopt, "bundle.cc", 7);
    Library direct(Library::FRAGMENT, "captured_direct");
    direct.def("g(Tensor x) -> Tensor");
    direct.impl("g", [](const Tensor& x) { return x; }, "cpu");
    EXPECT_EQ(Dispatcher::singleton().registerFallback(DispatchKey::CPU, KernelFunction::makeFallthrough(),
                                                       {"x", "a static fallback", true}).active(), false);
    {
      detail::SuspendStaticCapture suspend;  // Strata's own lazy initializers
      Library own(Library::FRAGMENT, "captured_suspended");
      own.def("h(Tensor x) -> Tensor");
      EXPECT_TRUE(Dispatcher::singleton().findSchema(parseOperatorName("captured_suspended::h")).has_value());
    }
    EXPECT_TRUE(detail::capturingStaticRegistrations());
  }
  EXPECT_FALSE(detail::capturingStaticRegistrations());
  for (const char* n : {"captured::f", "captured_direct::g"}) {
    EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName(n)).has_value()) << n;
  }
  ASSERT_EQ(got.blocks.size(), 1u);
  EXPECT_EQ(got.blocks[0].ns, "captured");
  EXPECT_EQ(got.blocks[0].file, "bundle.cc");
  ASSERT_EQ(got.refused.size(), 3u) << ::testing::PrintToString(got.refused);
  EXPECT_THAT(got.refused[0], HasSubstr("def captured_direct::g(Tensor x) -> Tensor (registered at"));
  EXPECT_THAT(got.refused[1], HasSubstr("impl captured_direct::g at CPU"));
  EXPECT_THAT(got.refused[2], HasSubstr("fallback at CPU (a static fallback)"));
  // The host runs the deferred block in the bundle's name, and removes it with it.
  {
    BundleRegistrar r("capturer", "1.0.0");
    r.runStaticBlocks(got.blocks);
    const auto regs = Dispatcher::singleton().registrations(parseOperatorName("captured::f"));
    ASSERT_EQ(regs.size(), 2u);
    for (const auto& reg : regs) {
      EXPECT_EQ(reg.owner, "capturer@1.0.0");
      EXPECT_THAT(reg.debug, HasSubstr(".cc:"));
    }
    EXPECT_EQ(op("captured::f").typed<Unary>().call(tagged(3)).item().toDouble(), 3);
  }
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("captured::f")).has_value());
}

// ---------------------------------------------------------------------------
// set_kernel_enabled and get_kernel.

TEST(KernelEnabled, StateIsKeptBeforeRegistrationAndTheSlotFallsToTheNextPrecedence) {
  EXPECT_TRUE(set_kernel_enabled("toggle::f", "cpu", false));  // previous state: enabled
  Library lib(Library::DEF, "toggle");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor&) { return tagged(1); }, "cpu");
  lib.impl("f", [](const Tensor&) { return tagged(0); }, "default");
  const auto f = op("toggle::f").typed<Unary>();
  EXPECT_EQ(tagOf(f.call(ones({1}))), 0);  // registered while disabled: stays disabled
  EXPECT_FALSE(set_kernel_enabled("toggle::f", "cpu", true));
  EXPECT_EQ(tagOf(f.call(ones({1}))), 1);
  {
    KernelEnabledScope a("toggle::f", "cpu", false);
    KernelEnabledScope b("toggle::f", "default", false);
    EXPECT_THAT(errorOf([&] { f.call(ones({1})); }), AllOf(HasSubstr("no kernel for dispatch key CPU"), HasSubstr("disabled")));
  }
  EXPECT_EQ(tagOf(f.call(ones({1}))), 1);
  EXPECT_THAT(Dispatcher::singleton().dump(parseOperatorName("toggle::f")), Not(HasSubstr("[disabled]")));
  EXPECT_THAT(errorOf([] { set_kernel_enabled("toggle::f", "gpu", false); }), HasSubstr("unknown dispatch key"));
  EXPECT_THAT(errorOf([] { set_kernel_enabled("not a name", "cpu", false); }), HasSubstr("invalid operator name"));
}

TEST(GetKernel, ReturnsTheComputedKernelAndFailsCleanlyOnceItIsGone) {
  std::optional<Library> lib(std::in_place, Library::DEF, "getk");
  lib->def("f(Tensor x) -> Tensor");
  lib->impl("f", [](const Tensor& x) { return full({1}, tagOf(x) + 1); }, "default");
  KernelHandle k = get_kernel("getk::f", "cpu");
  EXPECT_EQ(k.source(), "default kernel");
  EXPECT_EQ(k.owner(), "user");
  EXPECT_TRUE(k.valid());
  Stack s{tagged(1)};
  k.callBoxed(s);
  EXPECT_EQ(tagOf(s[0].toTensor()), 2);
  EXPECT_EQ(tagOf(k.call<Tensor, const Tensor&>(tagged(5))), 6);
  lib.reset();
  EXPECT_FALSE(k.valid());
  Stack s2{tagged(1)};
  EXPECT_THAT(errorOf([&] { k.callBoxed(DispatchKeySet(DispatchKey::CPU), s2); }), HasSubstr("was deregistered"));
  EXPECT_THAT(errorOf([] { get_kernel("getk::f", "cpu"); }), HasSubstr("no operator named getk::f"));
}

// ---------------------------------------------------------------------------
// dump, explain, trace.

TEST(Dump, ShowsTheTableRegistrationsOwnersAndState) {
  RegistrationOwnerGuard owner("dumper");
  Library lib(Library::DEF, "dumpns");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor& x) { return x; }, "cpu");
  lib.impl("f", [](const Tensor& x) { return x; }, "default");
  KernelEnabledScope off("dumpns::f", "cpu", false);
  const std::string d = dump("dumpns::f");
  EXPECT_THAT(d, HasSubstr("schema: dumpns::f(Tensor x) -> Tensor"));
  EXPECT_THAT(d, HasSubstr("owner=dumper"));
  EXPECT_THAT(d, HasSubstr("[disabled]"));
  EXPECT_THAT(d, HasSubstr("CPU: disabled"));
  EXPECT_THAT(d, HasSubstr("CPU                  default kernel [unboxed at CompositeExplicitAutograd, owner dumper"));
  EXPECT_THAT(d, HasSubstr("AutocastCPU          fallthrough [fallthrough, owner builtin"));
  EXPECT_THAT(d, HasSubstr("AutogradCPU          backend fallback [boxed, owner builtin"));
  EXPECT_THAT(d, HasSubstr("Batched              missing"));
}

TEST(Explain, SaysWhichKeysEachArgumentGaveAndWhichKernelsRan) {
  RegistrationOwnerGuard owner("explainer");
  Library lib(Library::DEF, "expl");
  lib.def("outer(Tensor a, Tensor? b) -> Tensor");
  lib.def("inner(Tensor a) -> Tensor");
  lib.impl("inner", [](const Tensor& a) { return a; }, "cpu");
  lib.impl("outer", [](DispatchKeySet ks, const Tensor& a, const std::optional<Tensor>&) {
    (void)ks;
    return op("expl::inner").typed<Unary>().call(a);
  }, "cpu");
  Tensor g = ones({1});
  g.set_requires_grad(true);
  IncludeDispatchKeyGuard inc(DispatchKey::AutocastCPU);
  const Explanation ex = explain(op("expl::outer"), Stack{g, IValue()});
  ASSERT_EQ(ex.arguments.size(), 2u);
  EXPECT_EQ(ex.arguments[0].name, "a");
  EXPECT_EQ(ex.arguments[0].keys, (DispatchKeySet{DispatchKey::CPU, DispatchKey::AutogradCPU}));
  EXPECT_TRUE(ex.arguments[1].keys.empty());
  EXPECT_TRUE(ex.tls_included.has(DispatchKey::AutocastCPU));
  // Autocast falls through; autograd's fallback steps below itself (a redispatch).
  EXPECT_EQ(ex.final_keys, (DispatchKeySet{DispatchKey::AutogradCPU, DispatchKey::CPU}));
  ASSERT_EQ(ex.steps.size(), 3u);
  EXPECT_EQ(ex.steps[0].op, "expl::outer");
  EXPECT_EQ(ex.steps[0].slot.source, "backend fallback");
  EXPECT_EQ(ex.steps[1].op, "expl::outer");
  EXPECT_TRUE(ex.steps[1].redispatch);
  EXPECT_EQ(ex.steps[1].slot.owner, "explainer");
  EXPECT_EQ(ex.steps[2].op, "expl::inner");
  EXPECT_EQ(ex.steps[2].depth, 2);
  ASSERT_EQ(ex.results.size(), 1u);
  const std::string text = ex.str();
  EXPECT_THAT(text, AllOf(HasSubstr("a: DispatchKeySet(AutogradCPU, CPU)"), HasSubstr("TLS included: DispatchKeySet(AutocastCPU)"),
                          HasSubstr("chosen: AutogradCPU -> backend fallback"), HasSubstr("  call expl::inner")));
}

TEST(Trace, LogsEveryStepToTheSinkWhileOn) {
  Library lib(Library::DEF, "traced");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor& x) { return x; }, "cpu");
  std::vector<std::string> lines;
  set_dispatch_trace_sink([&lines](std::string_view l) { lines.emplace_back(l); });
  set_dispatch_trace(true);
  op("traced::f").typed<Unary>().call(ones({1}));
  set_dispatch_trace(false);
  op("traced::f").typed<Unary>().call(ones({1}));
  set_dispatch_trace_sink(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], AllOf(HasSubstr("call traced::f"), HasSubstr("keys=DispatchKeySet(CPU) -> CPU: kernel")));
}

}  // namespace
}  // namespace strata

// A static block that fails halfway: nothing of it may stay registered.
STRATA_LIBRARY(static_bad, m) {
  m.def("ok(Tensor x) -> Tensor");
  m.def("ok(Tensor x) -> Tensor");  // duplicate: throws
}

// The macros, as a user writes them at namespace scope.
STRATA_LIBRARY(macro_ns, m) { m.def("twice(Tensor x) -> Tensor"); }
STRATA_LIBRARY_IMPL(macro_ns, CPU, m) {
  m.impl("twice", [](const strata::Tensor& x) { return strata::full({1}, x.item().toDouble() * 2); });
}
STRATA_LIBRARY_IMPL(macro_ns, Meta, m) {
  m.impl("twice", [](const strata::Tensor& x) { return strata::empty(x.sizes(), strata::kMeta); });
}
STRATA_LIBRARY_FRAGMENT(macro_frag, m) { m.def("one() -> int", [] { return int64_t{1}; }); }
STRATA_LIBRARY_FRAGMENT(macro_frag, m) { m.def("two() -> int", [] { return int64_t{2}; }); }

namespace strata {
namespace {
TEST(Macros, RegisterAtStaticInitialization) {
  const auto twice = op("macro_ns::twice").typed<Unary>();
  EXPECT_EQ(tagOf(twice.call(tagged(21))), 42);
  EXPECT_TRUE(twice.call(empty({1}, kMeta)).is_meta());
  EXPECT_EQ(op("macro_frag::one").typed<int64_t()>().call() + op("macro_frag::two").typed<int64_t()>().call(), 3);
  EXPECT_THAT(Dispatcher::singleton().registrations(parseOperatorName("macro_ns::twice"))[1].debug,
              HasSubstr("dispatcher_test.cc:"));
}
}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Error paths the tests above do not reach.
TEST(ErrorPaths, RegistrationMisusesNameTheThingAndTheReason) {
  Library alias_fb(Library::IMPL, "_", DispatchKey::CompositeExplicitAutograd);
  EXPECT_THAT(errorOf([&] { alias_fb.fallback(CppFunction::makeFallthrough()); }),
              AllOf(HasSubstr("runtime dispatch key"), HasSubstr("CompositeExplicitAutograd")));
  Library wild(Library::IMPL, "_", DispatchKey::CPU);
  EXPECT_THAT(errorOf([&] { wild.impl("f", [](const Tensor& x) { return x; }); }),
              HasSubstr("must name its namespace (ns::name)"));
  Library frag(Library::FRAGMENT, "errpaths");
  EXPECT_THAT(errorOf([&] {
                frag.def("boxed", CppFunction::makeFromBoxedFunctor([](const OperatorHandle&, Stack&) {}));
              }),
              HasSubstr("a schema cannot be inferred from a boxed kernel"));
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("errpaths::boxed")).has_value());
  EXPECT_THAT(errorOf([&] { frag.impl("f", [](const Tensor& x) { return x; }, "gpu"); }), HasSubstr("unknown dispatch key or device type 'gpu'"));
  EXPECT_THAT(errorOf([&] { frag.impl("bad name!", [](const Tensor& x) { return x; }); }),
              HasSubstr("invalid operator name 'bad name!'"));
}

TEST(ErrorPaths, ABoxedKernelThatLeavesTheWrongNumberOfResults) {
  Library lib(Library::DEF, "errret");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", CppFunction::makeFromBoxedFunctor([](const OperatorHandle&, Stack& s) { s.clear(); }), "cpu");
  EXPECT_EQ(errorOf([] { op("errret::f").typed<Unary>().call(ones({1})); }),
            "errret::f: the boxed kernel left 0 values on the stack, the schema returns 1");
}

TEST(ErrorPaths, AKernelHandleCalledWithTooFewValuesAndAnAliasKey) {
  Library lib(Library::DEF, "errk");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor& x) { return x; }, "default");
  const KernelHandle k = get_kernel("errk::f", "default");  // an alias key: the kernel registered there
  EXPECT_EQ(k.source(), "kernel");
  EXPECT_EQ(k.key(), DispatchKey::CompositeExplicitAutograd);
  Stack empty_stack;
  EXPECT_THAT(errorOf([&] { k.callBoxed(DispatchKeySet(DispatchKey::CPU), empty_stack); }),
              HasSubstr("the stack holds 0 values, the kernel takes 1 arguments"));
  EXPECT_THAT(errorOf([] { get_kernel("errk::f", "Autograd"); }), HasSubstr("errk::f has no kernel for Autograd"));
}

}  // namespace
}  // namespace strata
