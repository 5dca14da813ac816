// Autocast: the per-thread, per-device state and AutocastGuard; register_autocast and
// the cast policies; the core:: ops' policies; errors; explain notes; the cast
// cache. Each test defines its ops in its own namespace, and its Library objects
// and rules die with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <thread>

#include "../dispatch/test_util.h"
#include "strata/cuda.h"
#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/modes/autocast.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/trace_mode.h"
#include "strata/ops.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using modes::AutocastGuard;
using modes::CastPolicy;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using strata::testing::errorOf;

constexpr DeviceType kCpu = DeviceType::CPU;
constexpr DeviceType kCuda = DeviceType::CUDA;

bool keyIncluded(DispatchKey k) { return tls_local_dispatch_key_set().included.has(k); }

Tensor f32(std::vector<float> v) { return from_vector(v); }

// --- State and guards. -------------------------------------------------------

TEST(AutocastState, DefaultsArePyTorchs) {
  EXPECT_FALSE(modes::is_autocast_enabled(kCpu));
  EXPECT_FALSE(modes::is_autocast_enabled(kCuda));
  EXPECT_EQ(modes::get_autocast_dtype(kCpu), ScalarType::BFloat16);
  EXPECT_EQ(modes::get_autocast_dtype(kCuda), ScalarType::Half);
  EXPECT_EQ(modes::get_autocast_dtype(DeviceType::PrivateUse1), ScalarType::Half);
  EXPECT_TRUE(modes::is_autocast_cache_enabled(kCpu));
  EXPECT_EQ(modes::autocast_nesting(), 0);
  EXPECT_FALSE(keyIncluded(DispatchKey::AutocastCPU));
}

TEST(AutocastState, GuardsNestAndRestore) {
  {
    AutocastGuard outer(kCpu, ScalarType::BFloat16);
    EXPECT_TRUE(modes::is_autocast_enabled(kCpu));
    EXPECT_FALSE(modes::is_autocast_enabled(kCuda));
    EXPECT_TRUE(keyIncluded(DispatchKey::AutocastCPU));
    EXPECT_EQ(modes::autocast_nesting(), 1);
    {
      AutocastGuard inner(kCpu, ScalarType::Half, true, /*cache_enabled=*/false);
      EXPECT_EQ(modes::get_autocast_dtype(kCpu), ScalarType::Half);
      EXPECT_FALSE(modes::is_autocast_cache_enabled(kCpu));
      EXPECT_EQ(modes::autocast_nesting(), 2);
      {
        AutocastGuard off("cpu", std::nullopt, /*enabled=*/false);
        EXPECT_FALSE(modes::is_autocast_enabled(kCpu));
        EXPECT_FALSE(keyIncluded(DispatchKey::AutocastCPU));
        EXPECT_EQ(modes::get_autocast_dtype(kCpu), ScalarType::Half);  // dtype nullopt: kept
      }
      EXPECT_TRUE(modes::is_autocast_enabled(kCpu));
    }
    EXPECT_EQ(modes::get_autocast_dtype(kCpu), ScalarType::BFloat16);
    EXPECT_TRUE(modes::is_autocast_cache_enabled(kCpu));
    {
      AutocastGuard cuda(kCuda);
      EXPECT_TRUE(modes::is_autocast_enabled(kCuda));
      EXPECT_TRUE(keyIncluded(DispatchKey::AutocastCUDA));
      EXPECT_EQ(modes::get_autocast_dtype(kCuda), ScalarType::Half);
    }
    EXPECT_FALSE(keyIncluded(DispatchKey::AutocastCUDA));
  }
  EXPECT_FALSE(modes::is_autocast_enabled(kCpu));
  EXPECT_EQ(modes::autocast_nesting(), 0);
}

TEST(AutocastState, GuardRestoresOnException) {
  try {
    AutocastGuard g(kCpu, ScalarType::Half);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(modes::is_autocast_enabled(kCpu));
  EXPECT_EQ(modes::get_autocast_dtype(kCpu), ScalarType::BFloat16);
  EXPECT_EQ(modes::autocast_nesting(), 0);
}

TEST(AutocastState, ExcludedKeyMeansOff) {
  AutocastGuard g(kCpu);
  ExcludeDispatchKeyGuard inside_a_rule(DispatchKey::AutocastCPU);
  EXPECT_FALSE(modes::is_autocast_enabled(kCpu));
}

TEST(AutocastState, EachThreadHasItsOwn) {
  AutocastGuard g(kCpu, ScalarType::Half);
  bool other_enabled = true;
  ScalarType other_dtype = ScalarType::Half;
  int other_nesting = -1;
  std::thread([&] {
    other_enabled = modes::is_autocast_enabled(kCpu);
    other_dtype = modes::get_autocast_dtype(kCpu);
    other_nesting = modes::autocast_nesting();
  }).join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_dtype, ScalarType::BFloat16);
  EXPECT_EQ(other_nesting, 0);
  EXPECT_TRUE(modes::is_autocast_enabled(kCpu));
}

TEST(AutocastState, BadDevicesAndDtypesAreRefusedBeforeAnythingChanges) {
  EXPECT_THAT(errorOf([] { AutocastGuard g(DeviceType::Meta); }),
              AllOf(HasSubstr("'meta'"), HasSubstr("cpu, cuda or privateuse1")));
  EXPECT_THAT(errorOf([] { AutocastGuard g("gpu"); }), AllOf(HasSubstr("'gpu'"), HasSubstr("cpu, cuda or privateuse1")));
  EXPECT_THAT(errorOf([] { AutocastGuard g(kCpu, ScalarType::Float); }),
              AllOf(HasSubstr("cpu"), HasSubstr("float16 and bfloat16"), HasSubstr("float32")));
  EXPECT_THAT(errorOf([] { modes::set_autocast_dtype(kCuda, ScalarType::Long); }), HasSubstr("int64"));
  EXPECT_FALSE(modes::is_autocast_enabled(kCpu));
  EXPECT_EQ(modes::autocast_nesting(), 0);
  EXPECT_EQ(modes::get_autocast_dtype(kCuda), ScalarType::Half);
}

TEST(AutocastState, SetEnabledByHand) {
  modes::set_autocast_enabled(kCpu, true);
  EXPECT_TRUE(modes::is_autocast_enabled(kCpu));
  modes::set_autocast_enabled(kCpu, false);
  EXPECT_FALSE(modes::is_autocast_enabled(kCpu));
}

// --- register_autocast: eligibility. -------------------------------------------

namespace elig {
// Records the dtypes and devices of what reached the kernel.
std::vector<std::string> seen;
std::string describe(const Tensor& t) { return std::string(toString(t.dtype())) + "@" + t.device().str(); }
Tensor f(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d, const std::vector<Tensor>& l,
         const std::optional<Tensor>& o, int64_t n) {
  seen = {describe(a), describe(b), describe(c), describe(d)};
  for (const Tensor& t : l) seen.push_back(describe(t));
  seen.push_back(o ? describe(*o) : "None");
  seen.push_back(std::to_string(n));
  return a;
}
}  // namespace elig

TEST(RegisterAutocast, CastsOnlyEligibleTensorsAlsoInLists) {
  Library lib(Library::DEF, "actest_elig");
  lib.def("f(Tensor a, Tensor b, Tensor c, Tensor d, Tensor[] l, Tensor? o, int n) -> Tensor");
  lib.impl("f", &elig::f, "default");  // every backend, so a meta tensor reaches it too
  modes::register_autocast("actest_elig::f", "cpu", ScalarType::Half, lib);
  auto op = Dispatcher::singleton().findSchemaOrThrow("actest_elig::f")
                .typed<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const std::vector<Tensor>&,
                              const std::optional<Tensor>&, int64_t)>();
  const Tensor a = f32({1, 2});
  const Tensor b = ones({2}, ScalarType::Double);
  const Tensor c = ones({2}, ScalarType::Long);
  const Tensor d = ones({2}, TensorOptions(ScalarType::Float).with_device(DeviceType::Meta));
  const std::vector<Tensor> l{f32({1}), ones({1}, ScalarType::Double), ones({1}, ScalarType::BFloat16)};
  {
    AutocastGuard g(kCpu);
    op.call(a, b, c, d, l, f32({3}), 7);
  }
  EXPECT_THAT(elig::seen, ElementsAre("float16@cpu", "float64@cpu", "int64@cpu", "float32@meta", "float16@cpu",
                                      "float64@cpu", "float16@cpu", "float16@cpu", "7"));
  // Autocast off: nothing is cast.
  op.call(a, b, c, d, l, std::nullopt, 7);
  EXPECT_THAT(elig::seen, ElementsAre("float32@cpu", "float64@cpu", "int64@cpu", "float32@meta", "float32@cpu",
                                      "float64@cpu", "bfloat16@cpu", "None", "7"));
  // Autocast on for another device only: nothing on cpu is cast.
  {
    AutocastGuard g(kCuda);
    op.call(a, b, c, d, l, std::nullopt, 7);
  }
  EXPECT_EQ(elig::seen[0], "float32@cpu");
}

namespace written {
Tensor lastOut;
void f(const Tensor& a, Tensor& out) {
  lastOut = out;
  out.copy_(a);
}
}  // namespace written

TEST(RegisterAutocast, LeavesWrittenArgumentsAlone) {
  Library lib(Library::DEF, "actest_out");
  lib.def("f_out(Tensor a, Tensor(a!) out) -> ()");
  lib.impl("f_out", &written::f, "cpu");
  modes::register_autocast("actest_out::f_out", "cpu", ScalarType::BFloat16, lib);
  Tensor out = zeros({2});
  {
    AutocastGuard g(kCpu);
    Stack s{f32({1.5f, 2.5f}), out};
    Dispatcher::singleton().findSchemaOrThrow("actest_out::f_out").callBoxed(s);
  }
  EXPECT_EQ(written::lastOut.unsafeGetTensorImpl(), out.unsafeGetTensorImpl());
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1.5f, 2.5f}));
  written::lastOut = Tensor();
}

// --- The kernel below runs once; the rule can be switched off and removed. ------

namespace once {
int calls = 0;
ScalarType last = ScalarType::Float;
bool autocast_inside = false;
Tensor muladd(const Tensor& a, const Tensor& b, double c) {
  ++calls;
  last = a.dtype();
  autocast_inside = modes::is_autocast_enabled(DeviceType::CPU);
  return ops::add(ops::mul(a, b), c);
}
}  // namespace once

TEST(RegisterAutocast, TheKernelBelowRunsOnceAndTheRuleComesAndGoes) {
  Library lib(Library::DEF, "actest_once");
  lib.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  lib.impl("muladd", &once::muladd, "cpu");
  auto op = Dispatcher::singleton().findSchemaOrThrow("actest_once::muladd")
                .typed<Tensor(const Tensor&, const Tensor&, double)>();
  const Tensor a = f32({1, 2, 3, 4}), b = f32({2, 2, 2, 2});
  RegistrationHandleRAII rule = modes::register_autocast("actest_once::muladd", "cpu", ScalarType::BFloat16);
  {
    AutocastGuard g(kCpu);
    once::calls = 0;
    const Tensor r = op.call(a, b, 1.0);
    EXPECT_EQ(once::calls, 1);
    EXPECT_EQ(once::last, ScalarType::BFloat16);
    EXPECT_FALSE(once::autocast_inside);  // the rule excluded its key: the layers below are not autocast again
    EXPECT_EQ(r.dtype(), ScalarType::BFloat16);
    EXPECT_EQ(r.to(ScalarType::Float).to_vector<float>(), (std::vector<float>{3, 5, 7, 9}));

    // Switched off like any kernel: the slot falls back to the fallthrough.
    {
      KernelEnabledScope off("actest_once::muladd", "autocast:cpu", false);
      once::calls = 0;
      EXPECT_EQ(op.call(a, b, 1.0).dtype(), ScalarType::Float);
      EXPECT_EQ(once::calls, 1);
    }
    EXPECT_EQ(op.call(a, b, 1.0).dtype(), ScalarType::BFloat16);
    rule.reset();
    EXPECT_EQ(op.call(a, b, 1.0).dtype(), ScalarType::Float);
  }
}

TEST(RegisterAutocast, AnOpWithoutARuleFallsThrough) {
  Library lib(Library::DEF, "actest_none");
  lib.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  lib.impl("muladd", &once::muladd, "cpu");
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("actest_none::muladd");
  AutocastGuard g(kCpu);
  const Explanation ex = explain(op, Stack{f32({1}), f32({2}), 0.5});
  EXPECT_TRUE(ex.tls_included.has(DispatchKey::AutocastCPU));
  EXPECT_FALSE(ex.final_keys.has(DispatchKey::AutocastCPU));  // masked: nothing to pay
  EXPECT_EQ(ex.results[0].toTensor().dtype(), ScalarType::Float);
}

TEST(RegisterAutocast, ExplainShowsTheRuleAndEachCast) {
  Library lib(Library::DEF, "actest_explain");
  lib.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  lib.impl("muladd", &once::muladd, "cpu");
  {
    RegistrationOwnerGuard owner("acme@2.0.0");
    modes::register_autocast("actest_explain::muladd", "cpu", ScalarType::BFloat16, lib);
  }
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("actest_explain::muladd");
  AutocastGuard g(kCpu);
  const Explanation ex = explain(op, Stack{f32({1}), ones({1}, ScalarType::Double), 0.5});
  ASSERT_FALSE(ex.steps.empty());
  EXPECT_EQ(ex.steps[0].slot.key, DispatchKey::AutocastCPU);
  EXPECT_EQ(ex.steps[0].slot.owner, "acme@2.0.0");
  ASSERT_EQ(ex.steps[0].notes.size(), 1u);
  EXPECT_THAT(ex.steps[0].notes[0], AllOf(HasSubstr("AutocastCPU rule of actest_explain::muladd"),
                                          HasSubstr("owner acme@2.0.0"), HasSubstr("cast_inputs=bfloat16"),
                                          HasSubstr("a: float32 -> bfloat16"),
                                          HasSubstr("b: float64 kept (float64 is never cast)")));
  // The cast is a dispatched core::to, and the kernel below runs after it.
  const std::string text = ex.str();
  EXPECT_THAT(text, AllOf(HasSubstr("core::to.dtype"), HasSubstr("a: float32 -> bfloat16")));
  EXPECT_LT(text.find("core::to.dtype"), text.rfind("actest_explain::muladd"));
  // dump lists the rule with its policy and owner.
  EXPECT_THAT(dump("actest_explain::muladd"),
              AllOf(HasSubstr("AutocastCPU"), HasSubstr("owner=acme@2.0.0"),
                    HasSubstr("autocast rule, policy lower_precision_fp, cast_inputs=bfloat16")));
}

TEST(RegisterAutocast, ModesSeeTheCasts) {
  Library lib(Library::DEF, "actest_modes");
  lib.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  lib.impl("muladd", &once::muladd, "cpu");
  modes::register_autocast("actest_modes::muladd", "cpu", ScalarType::BFloat16, lib);
  auto op = Dispatcher::singleton().findSchemaOrThrow("actest_modes::muladd")
                .typed<Tensor(const Tensor&, const Tensor&, double)>();
  modes::ModeGuard trace(std::make_shared<modes::TraceMode>());
  AutocastGuard g(kCpu);
  op.call(f32({1}), f32({2}), 0.0);
  std::vector<std::string> ops;
  for (const auto& n : trace.as<modes::TraceMode>().graph().nodes) ops.push_back(n.op);
  // The two casts, then the op on bfloat16 (and what its kernel calls).
  ASSERT_GE(ops.size(), 3u);
  EXPECT_EQ(ops[0], "core::to.dtype");
  EXPECT_EQ(ops[1], "core::to.dtype");
  EXPECT_EQ(ops[2], "actest_modes::muladd");
}

// --- Errors. -------------------------------------------------------------------

TEST(RegisterAutocast, ErrorsNameTheOpAndTheReason) {
  Library lib(Library::DEF, "actest_err");
  lib.def("f(Tensor a) -> Tensor");
  lib.impl("f", [](const Tensor& a) { return a; }, "cpu");
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast("actest_err::nope", "cpu", ScalarType::Half); }),
              AllOf(HasSubstr("actest_err::nope"), HasSubstr("define it first")));
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast("actest_err::f", "gpu", ScalarType::Half); }),
              AllOf(HasSubstr("actest_err::f"), HasSubstr("'gpu'"), HasSubstr("cpu, cuda or privateuse1")));
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast("actest_err::f", "meta", ScalarType::Half); }),
              AllOf(HasSubstr("actest_err::f"), HasSubstr("'meta'")));
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast("actest_err::f", "cpu", ScalarType::Long); }),
              AllOf(HasSubstr("actest_err::f"), HasSubstr("cast_inputs must be a floating-point dtype"),
                    HasSubstr("int64")));
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast_policy("actest_err::f", "cpu", CastPolicy::fp32_set_opt_dtype); }),
              AllOf(HasSubstr("actest_err::f"), HasSubstr("ScalarType? dtype")));
  EXPECT_THAT(errorOf([] { modes::parseCastPolicy("fp16"); }), AllOf(HasSubstr("'fp16'"), HasSubstr("promote")));

  // A second rule for the same (op, device), from the same owner: refused unless allow_override.
  RegistrationHandleRAII first = modes::register_autocast("actest_err::f", "cpu", ScalarType::Half);
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast("actest_err::f", "cpu", ScalarType::BFloat16); }),
              AllOf(HasSubstr("actest_err::f"), HasSubstr("already has an autocast rule for cpu"),
                    HasSubstr("registered by 'user'"), HasSubstr("allow_override")));
  // Another device is another rule.
  RegistrationHandleRAII cuda = modes::register_autocast("actest_err::f", "cuda", ScalarType::Half);
  auto op = Dispatcher::singleton().findSchemaOrThrow("actest_err::f").typed<Tensor(const Tensor&)>();
  {
    RegistrationHandleRAII second =
        modes::register_autocast("actest_err::f", "cpu", ScalarType::BFloat16, /*allow_override=*/true);
    AutocastGuard g(kCpu);
    EXPECT_EQ(op.call(f32({1})).dtype(), ScalarType::BFloat16);  // the newer rule shadows the first
  }
  AutocastGuard g(kCpu);
  EXPECT_EQ(op.call(f32({1})).dtype(), ScalarType::Half);  // the first is back
}


namespace optlist {
std::vector<std::string> seen;
Tensor g(const std::vector<std::optional<Tensor>>& l) {
  seen.clear();
  for (const auto& t : l) seen.push_back(t ? toString(t->dtype()) : "None");
  return ones({1});
}
}  // namespace optlist

TEST(RegisterAutocast, CastsInsideOptionalTensorLists) {
  Library lib(Library::DEF, "actest_optlist");
  lib.def("g(Tensor?[] l) -> Tensor");
  lib.impl("g", &optlist::g, "cpu");
  modes::register_autocast("actest_optlist::g", "cpu", ScalarType::Half, lib);
  AutocastGuard on(kCpu);
  Stack s{IValue(std::vector<std::optional<Tensor>>{f32({1}), std::nullopt, ones({1}, ScalarType::Double)})};
  Dispatcher::singleton().findSchemaOrThrow("actest_optlist::g").callBoxed(s);
  EXPECT_THAT(optlist::seen, ElementsAre("float16", "None", "float64"));
}

TEST(RegisterAutocast, ASecondOwnerIsRefusedNamingTheFirst) {
  Library lib(Library::DEF, "actest_owner");
  lib.def("f(Tensor a) -> Tensor");
  lib.impl("f", [](const Tensor& a) { return a; }, "cpu");
  RegistrationHandleRAII first;
  {
    RegistrationOwnerGuard owner("alpha@1.0.0");
    first = modes::register_autocast("actest_owner::f", "cpu", ScalarType::Half);
  }
  RegistrationOwnerGuard owner("beta@2.0.0");
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast("actest_owner::f", "cpu", ScalarType::BFloat16); }),
              AllOf(HasSubstr("registered by 'alpha@1.0.0'"), HasSubstr("by 'beta@2.0.0'"), HasSubstr("is refused")));
}

TEST(RegisterAutocast, PrivateUse1RulesSitAtTheirOwnKey) {
  Library lib(Library::DEF, "actest_pu1");
  lib.def("f(Tensor a) -> Tensor");
  lib.impl("f", [](const Tensor& a) { return a; }, "cpu");
  modes::register_autocast("actest_pu1::f", "privateuse1", ScalarType::BFloat16, lib);
  EXPECT_THAT(dump("actest_pu1::f"), HasSubstr("AutocastPrivateUse1"));
  EXPECT_TRUE(is_kernel_enabled("actest_pu1::f", "autocast:privateuse1"));
  KernelEnabledScope off("actest_pu1::f", "autocast:privateuse1", false);
  EXPECT_FALSE(is_kernel_enabled("actest_pu1::f", "AutocastPrivateUse1"));
  AutocastGuard on(DeviceType::PrivateUse1);
  EXPECT_TRUE(modes::is_autocast_enabled(DeviceType::PrivateUse1));
  EXPECT_EQ(modes::get_autocast_dtype(DeviceType::PrivateUse1), ScalarType::Half);
}

// --- Policies, on core:: ops. ----------------------------------------------------

TEST(AutocastPolicies, EveryCoreRuleIsRegisteredForCpuAndCuda) {
  modes::initialize();
  const auto policies = modes::core_autocast_policies();
  ASSERT_EQ(policies.size(), 10u);
  for (const auto& p : policies) {
    std::map<DispatchKey, std::string> rules;
    for (const auto& r : Dispatcher::singleton().registrations(parseOperatorName(p.op))) {
      if (kAutocastKeys.has(r.key)) rules[r.key] = r.owner + " " + r.debug;
    }
    for (DispatchKey k : {DispatchKey::AutocastCPU, DispatchKey::AutocastCUDA}) {
      ASSERT_EQ(rules.count(k), 1u) << p.op << " " << toString(k);
      EXPECT_THAT(rules[k], AllOf(HasSubstr("builtin autocast rule, policy "),
                                  HasSubstr(std::string("policy ") + modes::toString(p.policy) + ";")))
          << p.op;
    }
  }
  EXPECT_THAT(dump("core::matmul"), HasSubstr("policy lower_precision_fp"));
}

TEST(AutocastPolicies, AUserRuleOverridesACoreRuleAndGivesItBack) {
  // Registered before any guard: the builtin rules are there first, so the user's
  // rule shadows the builtin one and the layer still initializes.
  RegistrationHandleRAII mine = modes::register_autocast_policy("core::exp", "cpu", CastPolicy::lower_precision_fp,
                                                                /*allow_override=*/true);
  EXPECT_THAT(errorOf([] { (void)modes::register_autocast_policy("core::exp", "cpu", CastPolicy::fp32); }),
              AllOf(HasSubstr("core::exp already has an autocast rule for cpu"), HasSubstr("'user'")));
  AutocastGuard g(kCpu);
  EXPECT_EQ(ops::exp(ones({2})).dtype(), ScalarType::BFloat16);
  mine.reset();
  EXPECT_EQ(ops::exp(ones({2}, ScalarType::BFloat16)).dtype(), ScalarType::Float);  // the builtin fp32 rule again
}

TEST(AutocastPolicies, LowerPrecisionFollowsTheGuardsDtype) {
  const Tensor x = ones({2, 2}), w = ones({2, 2});
  {
    AutocastGuard g(kCpu);
    const Tensor y = ops::matmul(x, w);
    EXPECT_EQ(y.dtype(), ScalarType::BFloat16);
    EXPECT_EQ(y.to(ScalarType::Float).to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  }
  {
    AutocastGuard g(kCpu, ScalarType::Half);
    EXPECT_EQ(ops::matmul(x, w).dtype(), ScalarType::Half);
    // float64 is never cast: matmul runs in float64.
    EXPECT_EQ(ops::matmul(x.to(ScalarType::Double), w.to(ScalarType::Double)).dtype(), ScalarType::Double);
  }
  EXPECT_EQ(ops::matmul(x, w).dtype(), ScalarType::Float);
}

TEST(AutocastPolicies, Fp32CastsUp) {
  AutocastGuard g(kCpu);
  const Tensor y = ops::exp(ones({3}, ScalarType::BFloat16));
  EXPECT_EQ(y.dtype(), ScalarType::Float);
  EXPECT_NEAR(y.to_vector<float>()[0], 2.7182817f, 1e-6);
  EXPECT_EQ(ops::exp(ones({3}, ScalarType::Double)).dtype(), ScalarType::Double);
}

TEST(AutocastPolicies, Fp32SetOptDtypeSetsTheDtypeArgument) {
  AutocastGuard g(kCpu);
  const Tensor h = full({4}, 0.25, ScalarType::BFloat16);
  EXPECT_EQ(ops::sum(h).dtype(), ScalarType::Float);
  EXPECT_EQ(ops::sum(h).item().to<double>(), 1.0);
  EXPECT_EQ(ops::sum(h, std::vector<int64_t>{0}).dtype(), ScalarType::Float);
  // A dtype given is kept; a first argument that is not eligible leaves dtype None.
  EXPECT_EQ(ops::sum(h, ScalarType::BFloat16).dtype(), ScalarType::BFloat16);
  EXPECT_EQ(ops::sum(ones({4}, ScalarType::Long)).dtype(), ScalarType::Long);
  EXPECT_EQ(ops::sum(ones({4}, ScalarType::Double)).dtype(), ScalarType::Double);
}

TEST(AutocastPolicies, PromoteRunsInTheWidestType) {
  AutocastGuard g(kCpu);
  const Tensor b16 = ones({2}, ScalarType::BFloat16), h16 = ones({2}, ScalarType::Half), f = ones({2});
  EXPECT_EQ(ops::add(b16, b16).dtype(), ScalarType::BFloat16);
  EXPECT_EQ(ops::add(b16, f).dtype(), ScalarType::Float);
  EXPECT_EQ(ops::mul(h16, b16).dtype(), ScalarType::Float);  // float16 with bfloat16: float32
  EXPECT_EQ(ops::cat({b16, f}).dtype(), ScalarType::Float);
  EXPECT_EQ(ops::stack({f, b16, b16}).dtype(), ScalarType::Float);
  // float64 is left as it is and does not take part: the bfloat16 stays bfloat16 and
  // the op's own type promotion gives float64.
  const Tensor d = ones({2}, ScalarType::Double);
  EXPECT_EQ(ops::add(b16, d).dtype(), ScalarType::Double);
}

TEST(AutocastPolicies, PromoteCastsTheNarrowArguments) {
  // Observed through explain: b16 is cast up, f is already float32.
  AutocastGuard g(kCpu);
  const Explanation ex = explain(Dispatcher::singleton().findSchemaOrThrow("core::add.Tensor"),
                                 Stack{ones({2}, ScalarType::BFloat16), ones({2})});
  ASSERT_FALSE(ex.steps.empty());
  ASSERT_EQ(ex.steps[0].notes.size(), 1u);
  EXPECT_THAT(ex.steps[0].notes[0], AllOf(HasSubstr("policy promote"), HasSubstr("self: bfloat16 -> float32"),
                                          HasSubstr("other: float32 (already)")));
}

// --- The cast cache. ---------------------------------------------------------

TEST(AutocastCache, LowPrecisionCastsOfFloat32TensorsThatRequireGradAreCachedPerScope) {
  Library lib(Library::DEF, "actest_cache");
  lib.def("ident(Tensor a) -> Tensor");
  lib.impl("ident", [](const Tensor& a) { return a; }, "cpu");
  modes::register_autocast_policy("actest_cache::ident", "cpu", CastPolicy::lower_precision_fp, lib);
  auto op = Dispatcher::singleton().findSchemaOrThrow("actest_cache::ident").typed<Tensor(const Tensor&)>();
  const Tensor w = ones({2});
  w.set_requires_grad(true);
  const Tensor x = ones({2});  // does not require grad: never cached
  {
    AutocastGuard outer(kCpu);
    Tensor first;
    {
      AutocastGuard inner(kCpu);
      first = op.call(w);
      EXPECT_EQ(first.dtype(), ScalarType::BFloat16);
      EXPECT_EQ(modes::autocast_cache_size(), 1u);
    }
    // Still inside the outer scope: the same cast comes back.
    // (The op has no autograd formula: autograd hands back an alias of what it
    // returned, so the cached cast shows as shared storage.)
    EXPECT_TRUE(op.call(w).is_alias_of(first));
    EXPECT_FALSE(op.call(x).is_alias_of(op.call(x)));
    EXPECT_EQ(modes::autocast_cache_size(), 1u);
    {
      AutocastGuard no_cache(kCpu, std::nullopt, true, /*cache_enabled=*/false);
      EXPECT_NE(op.call(w).unsafeGetTensorImpl(), first.unsafeGetTensorImpl());
    }
  }
  EXPECT_EQ(modes::autocast_cache_size(), 0u);  // the outermost guard's exit clears it
}

TEST(AutocastCache, OnlyTheScopesDtypeAndWholeTensorsAreCached) {
  Library lib(Library::DEF, "actest_cache2");
  lib.def("ident(Tensor a) -> Tensor");
  lib.impl("ident", [](const Tensor& a) { return a; }, "cpu");
  lib.def("ident16(Tensor a) -> Tensor");
  lib.impl("ident16", [](const Tensor& a) { return a; }, "cpu");
  modes::register_autocast_policy("actest_cache2::ident", "cpu", CastPolicy::lower_precision_fp, lib);
  modes::register_autocast("actest_cache2::ident16", "cpu", ScalarType::Half, lib);
  auto ident = Dispatcher::singleton().findSchemaOrThrow("actest_cache2::ident").typed<Tensor(const Tensor&)>();
  auto ident16 = Dispatcher::singleton().findSchemaOrThrow("actest_cache2::ident16").typed<Tensor(const Tensor&)>();
  const Tensor w = ones({2, 3});
  w.set_requires_grad(true);
  AutocastGuard on(kCpu);  // bfloat16
  // A cast to another dtype than the scope's is not cached (PyTorch's rule).
  EXPECT_EQ(ident16.call(w).dtype(), ScalarType::Half);
  EXPECT_EQ(modes::autocast_cache_size(), 0u);
  // Views made per call (a transpose, a slice) are not cached: they would pile up.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ident.call(ops::t(w)).dtype(), ScalarType::BFloat16);
    EXPECT_EQ(ident.call(ops::select(w, 0, 1)).dtype(), ScalarType::BFloat16);
  }
  EXPECT_EQ(modes::autocast_cache_size(), 0u);
  ident.call(w);
  ident.call(w);
  EXPECT_EQ(modes::autocast_cache_size(), 1u);
}

// --- torch.library.register_autocast's my_sin example: cuda float16 when a device
// is there, and its cpu bfloat16 twin always. ---

Tensor my_sin(const Tensor& x) { return ops::sin(x); }

TEST(AutocastExamples, MySinCpuBFloat16) {
  Library lib(Library::DEF, "actest_mylib");
  lib.def("my_sin(Tensor x) -> Tensor");
  lib.impl("my_sin", &my_sin, "default");
  modes::register_autocast("actest_mylib::my_sin", "cpu", ScalarType::BFloat16, lib);
  auto op = Dispatcher::singleton().findSchemaOrThrow("actest_mylib::my_sin").typed<Tensor(const Tensor&)>();
  const Tensor x = from_vector<float>({0.5f, 1.0f, -2.0f});
  Tensor y;
  {
    AutocastGuard g(kCpu, ScalarType::BFloat16);
    y = op.call(x);
  }
  EXPECT_EQ(y.dtype(), ScalarType::BFloat16);
  EXPECT_TRUE(ops::allclose(y.to(ScalarType::Float), ops::sin(x), 1e-2, 1e-2));
}

TEST(AutocastExamples, MySinCudaFloat16) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  Library lib(Library::DEF, "actest_mylib_cuda");
  lib.def("my_sin(Tensor x) -> Tensor");
  lib.impl("my_sin", &my_sin, "default");
  modes::register_autocast("actest_mylib_cuda::my_sin", "cuda", ScalarType::Half, lib);
  auto op = Dispatcher::singleton().findSchemaOrThrow("actest_mylib_cuda::my_sin").typed<Tensor(const Tensor&)>();
  const Tensor x = from_vector<float>({0.5f, 1.0f, -2.0f}).to(Device(DeviceType::CUDA, 0));
  Tensor y;
  {
    AutocastGuard g(kCuda, ScalarType::Half);
    y = op.call(x);
  }
  EXPECT_EQ(y.dtype(), ScalarType::Half);
  EXPECT_TRUE(y.is_cuda());
  EXPECT_TRUE(ops::allclose(y.to(kCPU).to(ScalarType::Float), ops::sin(x.to(kCPU)), 1e-2, 1e-2));
}

}  // namespace
}  // namespace strata
