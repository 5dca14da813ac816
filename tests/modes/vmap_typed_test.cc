// register_vmap<Sig>: a batching rule in functorch's C++ form (each Tensor followed by
// its batch dim, outputs followed by their out_dims). It is the boxed form's twin: the
// same results, checks, errors, --explain notes, dump line and switches, whether the
// op is called with its C++ signature (no boxing) or boxed. Each test defines its ops
// in its own Library objects; they and the rules die with the test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../dispatch/test_util.h"
#include "vmap_test_util.h"
#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/modes/vmap.h"
#include "strata/ops.h"
#include "strata/plugin.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using modes::Dim;
using modes::InDims;
using modes::VmapInfo;
using modes::VmapResult;
using modes::vmap;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using strata::testing::errorOf;

using MulAddSig = Tensor(const Tensor&, const Tensor&, double);
using SplitSig = std::tuple<Tensor, Tensor>(const Tensor&);
using MaybeAddSig = Tensor(const Tensor&, const std::optional<Tensor>&);

using vmaptest::rnd;
using vmaptest::same;

std::vector<int64_t> shape(const Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }

// vmaptyped::muladd (a*b+c), split (x*2, x+1) and maybe_add (x+y, or x with y None),
// each counting its kernel's calls.
struct TypedOps {
  Library def{Library::DEF, "vmaptyped"};
  Library cpu{Library::IMPL, "vmaptyped", DispatchKey::CPU};
  int calls = 0;
  TypedOperatorHandle<MulAddSig> muladd = define();
  TypedOperatorHandle<SplitSig> split =
      Dispatcher::singleton().findSchemaOrThrow("vmaptyped::split").typed<SplitSig>();
  TypedOperatorHandle<MaybeAddSig> maybe_add =
      Dispatcher::singleton().findSchemaOrThrow("vmaptyped::maybe_add").typed<MaybeAddSig>();

  TypedOperatorHandle<MulAddSig> define() {
    def.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
    def.def("split(Tensor x) -> (Tensor, Tensor)");
    def.def("maybe_add(Tensor x, Tensor? y) -> Tensor");
    cpu.impl("muladd", [this](const Tensor& a, const Tensor& b, double c) {
      ++calls;
      return ops::add(ops::mul(a, b), c);
    });
    cpu.impl("split", [this](const Tensor& x) {
      ++calls;
      return std::make_tuple(ops::mul(x, 2.0), ops::add(x, 1.0));
    });
    cpu.impl("maybe_add", [this](const Tensor& x, const std::optional<Tensor>& y) {
      ++calls;
      return y ? ops::add(x, *y) : ops::mul(x, 1.0);
    });
    return Dispatcher::singleton().findSchemaOrThrow("vmaptyped::muladd").typed<MulAddSig>();
  }
  // The op called boxed, as `strata call` and the fallbacks call it.
  Tensor muladdBoxed(const Tensor& a, const Tensor& b, double c) const {
    Stack s{a, b, c};
    muladd.callBoxed(s);
    return s[0].toTensor();
  }
};

// What a rule saw, per call.
struct Seen {
  VmapInfo info;
  std::vector<Dim> bdims;
  std::vector<bool> batched;  // whether each tensor it got was still a batched tensor
};

// A muladd rule in the typed form: both batch dims to the front, one call.
auto typedMulAdd(TypedOps& o, std::vector<Seen>& seen) {
  return [&o, &seen](const VmapInfo& info, const Tensor& a, Dim a_bdim, const Tensor& b, Dim b_bdim, double c) {
    seen.push_back({info, {a_bdim, b_bdim}, {modes::is_batched(a), modes::is_batched(b)}});
    return std::make_tuple(o.muladd.call(modes::move_bdim_to_front(a, a_bdim, info.batch_size),
                                         modes::move_bdim_to_front(b, b_bdim, info.batch_size), c),
                           0);
  };
}

TEST(RegisterVmapTyped, TypedAndBoxedCallsAndTheBoxedFormGiveTheSameResults) {
  TypedOps o;
  std::vector<Seen> seen;
  const Tensor x = rnd({4, 3}), y = rnd({3, 4}), w = rnd({3});
  const Tensor expect = ops::add(ops::mul(x, ops::transpose(y, 0, 1)), 2.0);
  std::vector<Tensor> results;
  {
    auto rule = modes::register_vmap<MulAddSig>("vmaptyped::muladd", typedMulAdd(o, seen));
    // Typed (the unboxed path) and boxed callers, over in_dims (0, 1) and an unmapped w.
    results.push_back(vmap([&](const Tensor& a, const Tensor& b) { return o.muladd.call(a, b, 2.0); }, {0, 1})(x, y));
    results.push_back(vmap([&](const Tensor& a, const Tensor& b) { return o.muladdBoxed(a, b, 2.0); }, {0, 1})(x, y));
    EXPECT_EQ(o.calls, 2);  // one call for the whole batch, each time
    ASSERT_EQ(seen.size(), 2u);
    for (const Seen& s : seen) {
      EXPECT_EQ(s.info.batch_size, 4);
      EXPECT_EQ(s.info.randomness, modes::Randomness::error);
      EXPECT_EQ(s.bdims, (std::vector<Dim>{0, 1}));
      EXPECT_EQ(s.batched, (std::vector<bool>{false, false}));  // the rule gets the values
    }
    const Tensor with_w = vmap([&](const Tensor& a) { return o.muladd.call(a, w, 1.0); })(x);
    EXPECT_EQ(seen.back().bdims, (std::vector<Dim>{0, std::nullopt}));
    EXPECT_TRUE(same(with_w, ops::add(ops::mul(x, w), 1.0)));
    // randomness reaches the rule.
    vmap([&](const Tensor& a) { return o.muladd.call(a, a, 0.0); }, 0, 0, "same")(x);
    EXPECT_EQ(seen.back().info.randomness, modes::Randomness::same);
  }
  {
    // The boxed form of the same rule.
    auto rule = modes::register_vmap("vmaptyped::muladd", [&](const VmapInfo& info, const InDims& d, Stack& args) {
      const Tensor a = modes::move_bdim_to_front(args[0].toTensor(), d[0], info.batch_size);
      const Tensor b = modes::move_bdim_to_front(args[1].toTensor(), d[1], info.batch_size);
      return VmapResult{{o.muladd.call(a, b, args[2].toDouble())}, {0}};
    });
    results.push_back(vmap([&](const Tensor& a, const Tensor& b) { return o.muladd.call(a, b, 2.0); }, {0, 1})(x, y));
  }
  for (const Tensor& r : results) EXPECT_TRUE(same(r, expect));
  // With no rule, the loop gives the same too.
  EXPECT_TRUE(same(vmap([&](const Tensor& a, const Tensor& b) { return o.muladd.call(a, b, 2.0); }, {0, 1})(x, y),
                   expect));
}

TEST(RegisterVmapTyped, TwoOutputsAnOptionalTensorAndOutDims) {
  TypedOps o;
  auto split = modes::register_vmap<SplitSig>("vmaptyped::split", [&](const VmapInfo&, const Tensor& x, Dim bdim) {
    // Leaves the batch dim where it is: out_dims as the input's, an int and a Dim.
    auto [p, q] = o.split.call(x);
    return std::make_tuple(p, *bdim, q, bdim);
  });
  std::vector<Dim> opt_bdims;
  std::vector<bool> opt_present;
  auto maybe = modes::register_vmap<MaybeAddSig>(
      "vmaptyped::maybe_add",
      [&](const VmapInfo& info, const Tensor& x, Dim x_bdim, const std::optional<Tensor>& y, Dim y_bdim) {
        opt_bdims.push_back(y_bdim);
        opt_present.push_back(y.has_value());
        const Tensor x0 = modes::move_bdim_to_front(x, x_bdim, info.batch_size);
        if (!y) return std::make_tuple(o.maybe_add.call(x0, std::nullopt), Dim(0));
        return std::make_tuple(o.maybe_add.call(x0, modes::move_bdim_to_front(*y, y_bdim, info.batch_size)), Dim(0));
      });
  const Tensor x = rnd({3, 5});
  const auto [p, q] = vmap([&](const Tensor& t) { return o.split.call(t); }, 1, {0, -1})(x);
  EXPECT_TRUE(same(p, ops::transpose(ops::mul(x, 2.0), 0, 1)));
  EXPECT_TRUE(same(q, ops::add(x, 1.0)));
  EXPECT_EQ(o.calls, 1);

  const Tensor y = rnd({5, 3});
  EXPECT_TRUE(same(vmap([&](const Tensor& a, const Tensor& b) { return o.maybe_add.call(a, b); }, {1, 0})(x, y),
                   ops::add(ops::transpose(x, 0, 1), y)));
  EXPECT_TRUE(same(vmap([&](const Tensor& a) { return o.maybe_add.call(a, std::nullopt); }, 1)(x),
                   ops::transpose(x, 0, 1)));
  const Tensor z = rnd({3});
  EXPECT_TRUE(same(vmap([&](const Tensor& a) { return o.maybe_add.call(a, z); })(y), ops::add(y, z)));
  EXPECT_EQ(opt_bdims, (std::vector<Dim>{0, std::nullopt, std::nullopt}));
  EXPECT_EQ(opt_present, (std::vector<bool>{true, false, true}));
}

TEST(RegisterVmapTyped, OutputsAreCheckedInOrderAsOnTheBoxedPath) {
  TypedOps o;
  const Tensor x = rnd({3, 5});
  auto f = [&](const Tensor& t) { return o.split.call(t); };
  std::string typed_error, boxed_error;
  {
    // Both out_dims out of range: output 0 is the one named.
    auto rule = modes::register_vmap<SplitSig>("vmaptyped::split", [&](const VmapInfo&, const Tensor& t, Dim) {
      return std::make_tuple(t, 7, t, 9);
    });
    typed_error = errorOf([&] { vmap(f)(x); });
  }
  {
    auto rule = modes::register_vmap("vmaptyped::split", [&](const VmapInfo&, const InDims&, Stack& args) {
      return VmapResult{{args[0], args[0]}, {7, 9}};
    });
    boxed_error = errorOf([&] { vmap(f)(x); });
  }
  EXPECT_THAT(typed_error, HasSubstr("returned out_dim 7 for output 0"));
  EXPECT_EQ(typed_error, boxed_error);
  EXPECT_EQ(modes::vmap_depth(), 0u);
}

TEST(RegisterVmapTyped, ACallWithTheOpsSignatureTakesTheTypedPath) {
  // What tells the paths apart from inside the rule: the typed path hands the rule the
  // wrapper's own value (held by the wrapper and the caller's x), the boxed path a
  // copy on its stack (one more holder). A boxed caller reaches the typed path too (the
  // kernel unboxes its stack); explain() observes the call, which the boxed path does.
  TypedOps o;
  std::vector<uint32_t> holders;
  auto rule = modes::register_vmap<MulAddSig>(
      "vmaptyped::muladd", [&](const VmapInfo& info, const Tensor& a, Dim a_bdim, const Tensor& b, Dim b_bdim, double c) {
        holders.push_back(a.getIntrusivePtr().use_count());
        return std::make_tuple(o.muladd.call(modes::move_bdim_to_front(a, a_bdim, info.batch_size),
                                             modes::move_bdim_to_front(b, b_bdim, info.batch_size), c),
                               0);
      });
  const Tensor x = rnd({4, 3}), w = rnd({3});
  const Tensor typed = vmap([&](const Tensor& t) { return o.muladd.call(t, w, 1.0); })(x);
  const Tensor boxed = vmap([&](const Tensor& t) { return o.muladdBoxed(t, w, 1.0); })(x);
  const Tensor observed = vmap([&](const Tensor& t) {
    Stack s = explain(o.muladd, Stack{t, w, 1.0}).results;
    return s[0].toTensor();
  })(x);
  EXPECT_TRUE(same(typed, boxed));
  EXPECT_TRUE(same(typed, observed));
  ASSERT_EQ(holders.size(), 3u);
  EXPECT_EQ(holders[0], 2u);  // x and the wrapper
  EXPECT_EQ(holders[1], 2u);
  EXPECT_GT(holders[2], 2u);
}

TEST(RegisterVmapTyped, AnOpThatWritesItsArgumentsTakesTheBoxedForm) {
  Library def(Library::DEF, "vmaptypedw");
  def.def("scale_(Tensor(a!) x, Tensor y) -> Tensor(a!)");
  EXPECT_THAT(errorOf([] {
                (void)modes::register_vmap<Tensor(const Tensor&, const Tensor&)>(
                    "vmaptypedw::scale_",
                    [](const VmapInfo&, const Tensor& x, Dim d, const Tensor&, Dim) { return std::make_tuple(x, d); });
              }),
              AllOf(HasSubstr("register_vmap<Sig>(vmaptypedw::scale_): vmaptypedw::scale_ writes its arguments"),
                    HasSubstr("give it a rule in the boxed form")));
}

TEST(RegisterVmapTyped, NestedLevelsARuleSeesOnlyItsOwn) {
  TypedOps o;
  std::vector<Seen> seen;
  auto rule = modes::register_vmap<MulAddSig>("vmaptyped::muladd", typedMulAdd(o, seen));
  const Tensor X = rnd({2, 3}), Y = rnd({5, 3});
  // x is batched at the outer level only: the inner rule sees it as a plain tensor
  // (still a batched tensor of the outer level), then the outer rule runs.
  const Tensor out = vmap([&](const Tensor& x) {
    return vmap([&](const Tensor& y) { return o.muladd.call(x, y, 0.0); })(Y);
  })(X);
  EXPECT_THAT(shape(out), ElementsAre(2, 5, 3));
  EXPECT_TRUE(same(out, ops::mul(ops::unsqueeze(X, 1), ops::unsqueeze(Y, 0))));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].info.batch_size, 5);
  EXPECT_EQ(seen[0].bdims, (std::vector<Dim>{std::nullopt, 0}));
  EXPECT_EQ(seen[0].batched, (std::vector<bool>{true, false}));
  EXPECT_EQ(seen[1].info.batch_size, 2);
  EXPECT_EQ(seen[1].bdims, (std::vector<Dim>{0, std::nullopt}));  // y's inner value is plain out here
  EXPECT_EQ(seen[1].batched, (std::vector<bool>{false, false}));
  // An op of the outer level only, called inside the inner vmap: the inner level has
  // nothing to do with it and passes it down (the boxed path's step 2).
  seen.clear();
  const Tensor outer_only = vmap([&](const Tensor& x) {
    return vmap([&](const Tensor& y) { return ops::add(y, o.muladd.call(x, x, 1.0)); })(Y);
  })(X);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].info.batch_size, 2);
  EXPECT_TRUE(same(outer_only, ops::add(ops::unsqueeze(Y, 0), ops::unsqueeze(ops::add(ops::mul(X, X), 1.0), 1))));
  EXPECT_EQ(modes::vmap_depth(), 0u);
}

TEST(RegisterVmapTyped, WhatTheRuleReturnsIsCheckedAndErrorsLeaveNoLevelBehind) {
  TypedOps o;
  const Tensor x = rnd({4, 3});
  auto f = [&](const Tensor& t) { return o.muladd.call(t, t, 1.0); };
  {
    auto rule = modes::register_vmap<MulAddSig>(
        "vmaptyped::muladd",
        [](const VmapInfo&, const Tensor& a, Dim, const Tensor&, Dim, double) { return std::make_tuple(a, 5); });
    EXPECT_THAT(errorOf([&] { vmap(f)(x); }),
                HasSubstr("the batching rule for vmaptyped::muladd returned out_dim 5 for output 0, a tensor of "
                          "dimensionality 2, so expected -2 <= out_dim < 2"));
    EXPECT_EQ(modes::vmap_depth(), 0u);
  }
  {
    Tensor captured;
    auto rule = modes::register_vmap<MulAddSig>(
        "vmaptyped::muladd",
        [&](const VmapInfo&, const Tensor&, Dim, const Tensor&, Dim, double) { return std::make_tuple(captured, 0); });
    EXPECT_THAT(errorOf([&] {
                  vmap([&](const Tensor& t) {
                    captured = t;
                    return f(t);
                  })(x);
                }),
                HasSubstr("the batching rule for vmaptyped::muladd returned (output 0) a batched tensor of vmap level"));
    EXPECT_EQ(modes::vmap_depth(), 0u);
  }
  {
    auto rule = modes::register_vmap<MulAddSig>(
        "vmaptyped::muladd", [](const VmapInfo&, const Tensor&, Dim, const Tensor&, Dim, double) -> std::tuple<Tensor, Dim> {
          STRATA_FAIL(Value, "the rule gave up");
        });
    EXPECT_THAT(errorOf([&] { vmap(f)(x); }), HasSubstr("the rule gave up"));
    EXPECT_EQ(modes::vmap_depth(), 0u);
    // The level stack is whole again: a nested vmap after the throw runs.
    EXPECT_TRUE(same(vmap(vmap([](const Tensor& t) { return ops::mul(t, t); }))(x), ops::mul(x, x)));
  }
  // A batched tensor that escaped its vmap is refused on the typed path too.
  Tensor leaked;
  std::vector<Seen> seen;
  auto rule = modes::register_vmap<MulAddSig>("vmaptyped::muladd", typedMulAdd(o, seen));
  vmap([&](const Tensor& t) {
    leaked = t;
    return t;
  })(x);
  EXPECT_THAT(errorOf([&] { o.muladd.call(leaked, leaked, 1.0); }), HasSubstr("whose vmap has returned"));
  EXPECT_THAT(errorOf([&] { vmap([&](const Tensor& t) { return o.muladd.call(t, leaked, 1.0); })(x); }),
              HasSubstr("whose vmap has returned"));
  EXPECT_EQ(modes::vmap_depth(), 0u);
}

TEST(RegisterVmapTyped, TheRegistrationIsCheckedAndIsOneLikeAnyOther) {
  TypedOps o;
  std::vector<Seen> seen;
  // Sig must be the op's: checked against the schema when the rule is registered.
  EXPECT_THAT(errorOf([&] {
                (void)modes::register_vmap<Tensor(const Tensor&, double)>(
                    "vmaptyped::muladd",
                    [](const VmapInfo&, const Tensor& a, Dim d, double) { return std::make_tuple(a, d); });
              }),
              AllOf(HasSubstr("vmaptyped::muladd: the kernel for Batched"), HasSubstr("does not match the operator's schema")));
  using RulePtr = std::tuple<Tensor, Dim> (*)(const VmapInfo&, const Tensor&, Dim, const Tensor&, Dim, double);
  EXPECT_THAT(errorOf([&] { (void)modes::register_vmap<MulAddSig>("vmaptyped::muladd", RulePtr{nullptr}); }),
              HasSubstr("register_vmap<Sig>(vmaptyped::muladd): the rule is empty"));
  EXPECT_THAT(errorOf([&] {
                (void)modes::register_vmap<MulAddSig>(
                    "vmaptyped::muladd",
                    std::function<std::tuple<Tensor, Dim>(const VmapInfo&, const Tensor&, Dim, const Tensor&, Dim,
                                                          double)>());
              }),
              HasSubstr("register_vmap<Sig>(vmaptyped::muladd): the rule is empty"));
  EXPECT_THAT(errorOf([&] { (void)modes::register_vmap<MulAddSig>("vmaptyped::nope", typedMulAdd(o, seen)); }),
              HasSubstr("register_vmap<Sig>(vmaptyped::nope): no operator named vmaptyped::nope has a schema"));
  {
    // From a static initializer while a host loads a bundle (Note [Static
    // registrations in bundles]): refused and recorded, not thrown, nothing registered.
    StaticRegistrations got;
    CaptureStaticRegistrations capture(got);
    const RegistrationHandleRAII refused = modes::register_vmap<MulAddSig>("vmaptyped::muladd", typedMulAdd(o, seen));
    ASSERT_EQ(got.refused.size(), 1u);
    EXPECT_THAT(got.refused[0], AllOf(HasSubstr("register_vmap<Sig>(vmaptyped::muladd) (registered at"),
                                      HasSubstr("vmap_typed_test.cc")));
    EXPECT_THAT(dump("vmaptyped::muladd"), Not(HasSubstr("vmap batching rule")));  // while its handle lives
  }
  RegistrationHandleRAII first;
  {
    RegistrationOwnerGuard owner("first_bundle@1.0.0");
    first = modes::register_vmap<MulAddSig>("vmaptyped::muladd", typedMulAdd(o, seen));
  }
  EXPECT_THAT(errorOf([&] { (void)modes::register_vmap<MulAddSig>("vmaptyped::muladd", typedMulAdd(o, seen)); }),
              HasSubstr("vmaptyped::muladd already has a batching rule, registered by 'first_bundle@1.0.0'"));
  // A boxed rule for the same op is refused the same way.
  EXPECT_THAT(errorOf([&] {
                (void)modes::register_vmap("vmaptyped::muladd",
                                     [](const VmapInfo&, const InDims& d, Stack& a) { return VmapResult{{a[0]}, {d[0]}}; });
              }),
              HasSubstr("already has a batching rule"));
  EXPECT_THAT(dump("vmaptyped::muladd"), AllOf(HasSubstr("vmap batching rule (typed)"), HasSubstr("first_bundle@1.0.0")));

  // Disabled, the op falls back to the loop; enabled again, the rule runs; gone, the loop.
  const Tensor x = rnd({4, 3});
  auto f = [&](const Tensor& t) { return o.muladd.call(t, t, 1.0); };
  const Tensor expect = ops::add(ops::mul(x, x), 1.0);
  const OperatorName name = parseOperatorName("vmaptyped::muladd");
  Dispatcher::singleton().setKernelEnabled(name, DispatchKey::Batched, false);
  o.calls = 0;
  EXPECT_TRUE(same(vmap(f)(x), expect));
  EXPECT_EQ(o.calls, 4);
  EXPECT_TRUE(seen.empty());
  Dispatcher::singleton().setKernelEnabled(name, DispatchKey::Batched, true);
  o.calls = 0;
  EXPECT_TRUE(same(vmap(f)(x), expect));
  EXPECT_EQ(o.calls, 1);
  EXPECT_EQ(seen.size(), 1u);
  first = RegistrationHandleRAII();
  o.calls = 0;
  EXPECT_TRUE(same(vmap(f)(x), expect));
  EXPECT_EQ(o.calls, 4);
  EXPECT_EQ(seen.size(), 1u);
}

TEST(RegisterVmapTyped, ExplainNamesTheRuleWithItsInDimsAndOutDims) {
  TypedOps o;
  std::vector<Seen> seen;
  auto rule = modes::register_vmap<MulAddSig>("vmaptyped::muladd", typedMulAdd(o, seen));
  std::string what;
  const Tensor w = rnd({3});
  const Tensor out = vmap([&](const Tensor& t) {
    what = explain(o.muladd, Stack{t, w, 2.0}).str();
    return o.muladd.call(t, w, 2.0);
  })(rnd({4, 3}));
  EXPECT_THAT(what, AllOf(HasSubstr("Batched"), HasSubstr("vmap batching rule (typed)"),
                          HasSubstr("batching rule with in_dims (0, None, None)"), HasSubstr("out_dims (0,)")));
  EXPECT_EQ(seen.size(), 2u);  // explain ran it (the boxed path), then the call (the typed path)
  EXPECT_THAT(shape(out), ElementsAre(4, 3));
}

}  // namespace
}  // namespace strata
