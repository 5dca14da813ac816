// Dispatch modes: the mode stack, handler semantics, register_torch_dispatch, the
// built-in modes and named mode types. Each test defines its ops in its own
// namespace, and its Library objects die with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <sstream>
#include <stdexcept>
#include <thread>

#include "../dispatch/test_util.h"
#include "strata/library.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/log_mode.h"
#include "strata/modes/trace_mode.h"
#include "strata/ops.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using modes::DispatchMode;
using modes::ModeGuard;
using modes::TensorTypes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using strata::testing::errorOf;

bool modeKeyIncluded() { return tls_local_dispatch_key_set().included.has(DispatchKey::Mode); }

Tensor clone(const Tensor& x) { return ops::clone(x); }

std::vector<float> values(const Tensor& t) { return t.to(ScalarType::Float).to_vector<float>(); }

bool same(const Tensor& a, const Tensor& b) { return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl(); }

// Records what it saw, then runs the op below.
struct RecordingMode : DispatchMode {
  explicit RecordingMode(std::string tag, std::vector<std::string>* log) : tag(std::move(tag)), log(log) {}
  Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) override {
    log->push_back(tag + ":" + op.name());
    last_types = types;
    last_args = args;
    stack_size_inside = modes::mode_stack_size();
    mode_key_inside = modeKeyIncluded();
    return modes::call(op, std::move(args));
  }
  std::string tag;
  std::vector<std::string>* log;
  TensorTypes last_types;
  Stack last_args;
  size_t stack_size_inside = 99;
  bool mode_key_inside = true;
};

// A one-op namespace whose CPU kernel counts its calls.
struct CountingOp {
  explicit CountingOp(const char* ns) : lib(Library::DEF, ns) {
    lib.def("foo(Tensor x) -> Tensor");
    lib.impl("foo", [this](const Tensor& x) {
      ++kernel_calls;
      return clone(x);
    }, DispatchKey::CPU);
    op = Dispatcher::singleton().findSchemaOrThrow(std::string(ns) + "::foo");
  }
  Tensor call(const Tensor& x) const { return op->typed<Tensor(const Tensor&)>().call(x); }
  Library lib;
  std::optional<OperatorHandle> op;
  int kernel_calls = 0;
};

TEST(ModeStack, PushAndPopManageTheModeKeyInTheTlsIncludedSet) {
  std::vector<std::string> log;
  ASSERT_EQ(modes::mode_stack_size(), 0u);
  EXPECT_FALSE(modeKeyIncluded());
  auto a = std::make_shared<RecordingMode>("a", &log);
  auto b = std::make_shared<RecordingMode>("b", &log);
  modes::push_mode(a);
  EXPECT_TRUE(modeKeyIncluded());
  modes::push_mode(b);
  EXPECT_EQ(modes::mode_stack_size(), 2u);
  EXPECT_EQ(modes::current_mode(), b);
  EXPECT_EQ(modes::pop_mode(), b);
  EXPECT_TRUE(modeKeyIncluded());
  EXPECT_EQ(modes::pop_mode(), a);
  EXPECT_FALSE(modeKeyIncluded());
  EXPECT_THAT(errorOf([] { modes::pop_mode(); }), HasSubstr("mode stack is empty"));
  EXPECT_THAT(errorOf([] { modes::push_mode(nullptr); }), HasSubstr("null"));
}

TEST(ModeStack, GuardPushesForAScopeAndScopesNest) {
  std::vector<std::string> log;
  {
    ModeGuard outer(std::make_shared<RecordingMode>("outer", &log));
    EXPECT_TRUE(modeKeyIncluded());
    {
      ModeGuard inner(std::make_shared<RecordingMode>("inner", &log));
      EXPECT_EQ(modes::mode_stack_size(), 2u);
      EXPECT_EQ(modes::current_mode().get(), &inner.mode());
    }
    EXPECT_EQ(modes::mode_stack_size(), 1u);
    EXPECT_EQ(modes::current_mode().get(), &outer.mode());
  }
  EXPECT_EQ(modes::mode_stack_size(), 0u);
  EXPECT_FALSE(modeKeyIncluded());
}

TEST(ModeStack, OpsWithNoModeNeverReachTheLayer) {
  CountingOp foo("mode_nomode");
  std::vector<std::string> log;
  auto m = std::make_shared<RecordingMode>("m", &log);
  {
    ModeGuard g(m);
  }
  foo.call(ops::ones({3}));
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(foo.kernel_calls, 1);
  // The Mode slot holds the builtin fallback for every op, without the op registering anything.
  const auto table = Dispatcher::singleton().computedTable(foo.op->operator_name());
  bool found = false;
  for (const auto& s : table) {
    if (s.key != DispatchKey::Mode) continue;
    found = true;
    EXPECT_EQ(s.source, "backend fallback");
    EXPECT_EQ(s.owner, "builtin");
  }
  EXPECT_TRUE(found);
}

TEST(ModeHandler, SeesTheOpTheArgumentsAndTheirTypes) {
  Library lib(Library::DEF, "mode_sees");
  lib.def("f(Tensor a, Tensor[] bs, float c, int d=7) -> Tensor");
  lib.impl("f", [](const Tensor& a, const std::vector<Tensor>&, double, int64_t) { return a; }, DispatchKey::CPU);
  auto op = Dispatcher::singleton().findSchemaOrThrow("mode_sees::f");
  std::vector<std::string> log;
  auto m = std::make_shared<RecordingMode>("m", &log);
  const Tensor a = ops::ones({2}, ScalarType::Float);
  const Tensor b = ops::ones({3}, ScalarType::Long);
  Stack s{a, std::vector<Tensor>{b, a}, 2.5};
  {
    ModeGuard g(m);
    op.callBoxed(s);
  }
  ASSERT_EQ(s.size(), 1u);
  EXPECT_TRUE(same(s[0].toTensor(), a));
  EXPECT_THAT(log, ElementsAre("m:mode_sees::f"));
  ASSERT_EQ(m->last_args.size(), 4u);  // the default is filled in
  EXPECT_TRUE(same(m->last_args[0].toTensor(), a));
  EXPECT_EQ(m->last_args[2].toDouble(), 2.5);
  EXPECT_EQ(m->last_args[3].toInt(), 7);
  ASSERT_EQ(m->last_types.size(), 2u);
  EXPECT_EQ(m->last_types[0].str(), "cpu:float32");
  EXPECT_EQ(m->last_types[1].str(), "cpu:int64");
  EXPECT_TRUE(m->last_types.keys().has(DispatchKey::CPU));
  EXPECT_EQ(m->stack_size_inside, 0u);  // the mode is off the stack while it runs
  EXPECT_FALSE(m->mode_key_inside);
}

TEST(ModeHandler, CallingTheOpFromAHandlerReachesTheNextModeThenTheKernel) {
  CountingOp foo("mode_chain");
  std::vector<std::string> log;
  auto bottom = std::make_shared<RecordingMode>("bottom", &log);
  auto top = std::make_shared<RecordingMode>("top", &log);
  const Tensor x = ops::ones({3});  // factories are ops too: made before the modes
  {
    ModeGuard g1(bottom);
    ModeGuard g2(top);
    foo.call(x);
    EXPECT_EQ(modes::mode_stack_size(), 2u);  // both put back
    EXPECT_EQ(modes::current_mode(), top);
  }
  EXPECT_THAT(log, ElementsAre("top:mode_chain::foo", "bottom:mode_chain::foo"));
  EXPECT_EQ(top->stack_size_inside, 1u);
  EXPECT_TRUE(top->mode_key_inside);
  EXPECT_EQ(bottom->stack_size_inside, 0u);
  EXPECT_FALSE(bottom->mode_key_inside);
  EXPECT_EQ(foo.kernel_calls, 1);
}

// Pushes `extra` for the duration of its handler, then calls the op.
struct PushingMode : DispatchMode {
  Stack dispatch(const OperatorHandle& op, const TensorTypes&, Stack args) override {
    ModeGuard g(extra);
    return modes::call(op, std::move(args));
  }
  std::shared_ptr<DispatchMode> extra;
};

TEST(ModeHandler, AModePushedInsideAHandlerSeesTheCallsItMakes) {
  CountingOp foo("mode_inner_push");
  std::vector<std::string> log;
  auto bottom = std::make_shared<RecordingMode>("bottom", &log);
  auto pusher = std::make_shared<PushingMode>();
  pusher->extra = std::make_shared<RecordingMode>("pushed", &log);
  const Tensor x = ops::ones({2});
  {
    ModeGuard g1(bottom);
    ModeGuard g2(pusher);
    foo.call(x);
    EXPECT_EQ(modes::mode_stack_size(), 2u);
  }
  EXPECT_THAT(log, ElementsAre("pushed:mode_inner_push::foo", "bottom:mode_inner_push::foo"));
  EXPECT_EQ(foo.kernel_calls, 1);
}

// Inside its handler, looks at the stack, pops the next mode down and pushes it
// back, then pushes `left` and leaves it there.
struct RearrangingMode : DispatchMode {
  Stack dispatch(const OperatorHandle& op, const TensorTypes&, Stack args) override {
    seen = modes::mode_stack();
    current = modes::current_mode();
    auto below = modes::pop_mode();
    size_after_pop = modes::mode_stack_size();
    modes::push_mode(below);
    modes::push_mode(left);
    return args;  // the op's one argument as its one result
  }
  std::shared_ptr<DispatchMode> left;
  std::vector<std::shared_ptr<DispatchMode>> seen;
  std::shared_ptr<DispatchMode> current;
  size_t size_after_pop = 99;
};

TEST(ModeHandler, AHandlerSeesAndChangesOnlyTheStackBelowItsMode) {
  CountingOp foo("mode_rearrange");
  std::vector<std::string> log;
  auto bottom = std::make_shared<RecordingMode>("bottom", &log);
  auto middle = std::make_shared<RecordingMode>("middle", &log);
  auto top = std::make_shared<RearrangingMode>();
  top->left = std::make_shared<RecordingMode>("left", &log);
  const Tensor x = ops::ones({2});
  modes::push_mode(bottom);
  modes::push_mode(middle);
  modes::push_mode(top);
  foo.call(x);
  EXPECT_EQ(top->seen, (std::vector<std::shared_ptr<DispatchMode>>{bottom, middle}));
  EXPECT_EQ(top->current, middle);
  EXPECT_EQ(top->size_after_pop, 1u);
  // As PyTorch's _pop_mode_temporarily: the handler's mode goes back on top of
  // whatever the handler left.
  EXPECT_EQ(modes::mode_stack(), (std::vector<std::shared_ptr<DispatchMode>>{bottom, middle, top->left, top}));
  EXPECT_TRUE(modeKeyIncluded());
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(foo.kernel_calls, 0);
  for (int i = 0; i < 4; ++i) modes::pop_mode();
  EXPECT_FALSE(modeKeyIncluded());
}

struct ThrowingMode : DispatchMode {
  Stack dispatch(const OperatorHandle& op, const TensorTypes&, Stack) override {
    throw std::runtime_error("no " + op.name() + " today");
  }
};

TEST(ModeHandler, AnExceptionRestoresTheStackAndTheTlsSets) {
  CountingOp foo("mode_throw");
  std::vector<std::string> log;
  auto bottom = std::make_shared<RecordingMode>("bottom", &log);
  auto thrower = std::make_shared<ThrowingMode>();
  const RawLocalDispatchKeySet before_raw = strata::detail::tls_local_dispatch_key_set;
  const Tensor x = ops::ones({2});
  {
    ModeGuard g1(bottom);
    ModeGuard g2(thrower);
    const auto before = tls_local_dispatch_key_set();
    EXPECT_THROW(
        {
          try {
            foo.call(x);
          } catch (const std::runtime_error& e) {
            EXPECT_STREQ(e.what(), "no mode_throw::foo today");
            throw;
          }
        },
        std::runtime_error);
    EXPECT_EQ(modes::mode_stack_size(), 2u);
    EXPECT_EQ(modes::current_mode(), thrower);
    EXPECT_EQ(tls_local_dispatch_key_set().included, before.included);
    EXPECT_EQ(tls_local_dispatch_key_set().excluded, before.excluded);
  }
  EXPECT_EQ(strata::detail::tls_local_dispatch_key_set.included, before_raw.included);
  EXPECT_EQ(strata::detail::tls_local_dispatch_key_set.excluded, before_raw.excluded);
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(foo.kernel_calls, 0);
}

struct WrongCountMode : DispatchMode {
  Stack dispatch(const OperatorHandle&, const TensorTypes&, Stack) override { return {}; }
  std::string name() const override { return "wrong_count"; }
};

TEST(ModeHandler, ResultsThatDoNotFitTheSchemaAreAnErrorNamingModeAndOp) {
  CountingOp foo("mode_wrong");
  const Tensor x = ops::ones({2});
  ModeGuard g(std::make_shared<WrongCountMode>());
  const std::string e = errorOf([&] { foo.call(x); });
  EXPECT_THAT(e, HasSubstr("mode_wrong::foo"));
  EXPECT_THAT(e, HasSubstr("wrong_count"));
  EXPECT_THAT(e, HasSubstr("returned 0 value(s)"));
}

struct WrongTypeMode : DispatchMode {
  Stack dispatch(const OperatorHandle&, const TensorTypes&, Stack) override { return {IValue(int64_t{3})}; }
  std::string name() const override { return "wrong_type"; }
};

TEST(ModeHandler, AResultOfTheWrongTypeIsAnErrorNamingModeOpAndResult) {
  CountingOp foo("mode_wrong_type");
  const Tensor x = ops::ones({2});
  ModeGuard g(std::make_shared<WrongTypeMode>());
  const std::string e = errorOf([&] { foo.call(x); });
  EXPECT_THAT(e, HasSubstr("mode_wrong_type::foo: the dispatch() of mode wrong_type returned int for result 0, "
                           "which the schema declares Tensor"));
}

TEST(ModeStack, AGuardWhoseModeIsNotOnTopLeavesTheStackAlone) {
  std::vector<std::string> log;
  auto stray = std::make_shared<RecordingMode>("stray", &log);
  {
    ModeGuard g(std::make_shared<RecordingMode>("scoped", &log));
    modes::push_mode(stray);  // not popped before the guard ends
  }
  EXPECT_EQ(modes::mode_stack_size(), 2u);
  EXPECT_EQ(modes::pop_mode(), stray);
  modes::pop_mode();
  EXPECT_FALSE(modeKeyIncluded());
}

TEST(ModeHandler, HandlersRunBelowTheLayersAboveMode) {
  // An op with an AutogradCPU kernel that redispatches: called with a tensor that
  // requires grad, the autograd kernel runs once, not again when the handler calls
  // the op (as __torch_dispatch__ runs below autograd).
  Library lib(Library::DEF, "mode_below");
  lib.def("foo(Tensor x) -> Tensor");
  int autograd_calls = 0;
  int cpu_calls = 0;
  lib.impl("foo", [&](const Tensor& x) { ++cpu_calls; return clone(x); }, DispatchKey::CPU);
  lib.impl("foo", [&](DispatchKeySet ks, const Tensor& x) {
    ++autograd_calls;
    static auto op = Dispatcher::singleton().findSchemaOrThrow("mode_below::foo").typed<Tensor(const Tensor&)>();
    return op.redispatch(ks & keysBelow(DispatchKey::AutogradCPU), x);
  }, DispatchKey::AutogradCPU);
  std::vector<std::string> log;
  auto m = std::make_shared<RecordingMode>("m", &log);
  Stack s{ops::ones({2}).set_requires_grad(true)};
  {
    ModeGuard g(m);
    Dispatcher::singleton().findSchemaOrThrow("mode_below::foo").callBoxed(s);
  }
  EXPECT_EQ(autograd_calls, 1);
  EXPECT_EQ(cpu_calls, 1);
  EXPECT_THAT(log, ElementsAre("m:mode_below::foo"));
}

// --- The seeds' example: torch.library.register_torch_dispatch. ---

struct MyMode : DispatchMode {
  Stack dispatch(const OperatorHandle& op, const TensorTypes&, Stack args) override {
    return modes::call(op, std::move(args));  // func(*args, **kwargs)
  }
};

TEST(RegisterTorchDispatch, TheSeedsExample) {
  Library lib(Library::DEF, "mylib_seed_mode");
  lib.def("foo", [](const Tensor& x) { return clone(x); });
  auto rule = modes::register_torch_dispatch<MyMode>(
      "mylib_seed_mode::foo", [](MyMode&, const OperatorHandle&, const TensorTypes&, Stack args) -> Stack {
        const Tensor x = args[0].toTensor();
        return {ops::add(x, 1)};
      });
  auto foo = Dispatcher::singleton().findSchemaOrThrow("mylib_seed_mode::foo").typed<Tensor(const Tensor&)>();
  const Tensor x = ops::arange(3).to(ScalarType::Float);
  Tensor y = foo.call(x);
  EXPECT_TRUE(ops::allclose(y, x));
  {
    ModeGuard g(std::make_shared<MyMode>());
    y = foo.call(x);  // the rule's add runs with MyMode off the stack
  }
  EXPECT_TRUE(ops::allclose(y, ops::add(x, 1)));
  y = foo.call(x);
  EXPECT_TRUE(ops::allclose(y, x));
}

struct SubMode : MyMode {};
struct OtherMode : MyMode {};

TEST(RegisterTorchDispatch, RulesAreFoundByExactTypeOnly) {
  CountingOp foo("mode_exact");
  const Tensor x = ops::ones({1});
  int rule_calls = 0;
  auto rule = modes::register_torch_dispatch<MyMode>(
      "mode_exact::foo", [&](MyMode& mode, const OperatorHandle& op, const TensorTypes&, Stack args) -> Stack {
        EXPECT_EQ(typeid(mode), typeid(MyMode));
        EXPECT_EQ(op.name(), "mode_exact::foo");
        ++rule_calls;
        return modes::call(op, std::move(args));
      });
  {
    ModeGuard g(std::make_shared<SubMode>());  // a subclass: the mode's own handler
    foo.call(x);
  }
  EXPECT_EQ(rule_calls, 0);
  {
    ModeGuard g(std::make_shared<MyMode>());
    foo.call(x);
  }
  EXPECT_EQ(rule_calls, 1);
  EXPECT_EQ(foo.kernel_calls, 2);
}

TEST(RegisterTorchDispatch, ASecondRuleForTheSameOpAndModeTypeIsRefused) {
  CountingOp foo("mode_dup");
  auto fn = [](MyMode&, const OperatorHandle& op, const TensorTypes&, Stack args) { return modes::call(op, std::move(args)); };
  auto first = modes::register_torch_dispatch<MyMode>("mode_dup::foo", fn);
  const std::string e = errorOf([&] { auto second = modes::register_torch_dispatch<MyMode>("mode_dup::foo", fn); });
  EXPECT_THAT(e, HasSubstr("mode_dup::foo already has a torch_dispatch rule for strata::(anonymous namespace)::MyMode"));
  EXPECT_THAT(e, HasSubstr("modes_test.cc"));
  // Another mode type is fine, and so is the same type again once the first is gone.
  auto other = modes::register_torch_dispatch<OtherMode>("mode_dup::foo", fn);
  first.reset();
  auto again = modes::register_torch_dispatch<MyMode>("mode_dup::foo", fn);
  EXPECT_EQ(Dispatcher::singleton().rules(foo.op->operator_name()).size(), 2u);
  EXPECT_THAT(errorOf([&] { auto r = modes::register_torch_dispatch<MyMode>("mode_dup::nope", fn); }),
              HasSubstr("no operator named mode_dup::nope"));
  EXPECT_THAT(errorOf([&] { auto r = modes::register_torch_dispatch<MyMode>("not a name", fn); }),
              HasSubstr("not a name"));
}

TEST(RegisterTorchDispatch, RulesAreOwnedDumpedAndGoWithTheirLibrary) {
  CountingOp foo("mode_owned");
  const Tensor x = ops::ones({1});
  int rule_calls = 0;
  EXPECT_FALSE(foo.op->hasRules());  // the fallback skips the lookup for such ops
  {
    RegistrationOwnerGuard owner("flops@1.0.0");
    Library bundle(Library::IMPL, "mode_owned");
    modes::register_torch_dispatch<MyMode>(
        "mode_owned::foo",
        [&](MyMode&, const OperatorHandle& op, const TensorTypes&, Stack args) {
          ++rule_calls;
          return modes::call(op, std::move(args));
        },
        bundle);
    const auto rules = Dispatcher::singleton().rules(foo.op->operator_name());
    ASSERT_EQ(rules.size(), 1u);
    EXPECT_EQ(rules[0].kind, "torch_dispatch");
    EXPECT_TRUE(foo.op->hasRules());
    EXPECT_EQ(rules[0].owner, "flops@1.0.0");
    EXPECT_THAT(rules[0].target, HasSubstr("MyMode"));
    EXPECT_THAT(rules[0].debug, HasSubstr("modes_test.cc:"));
    EXPECT_THAT(dump("mode_owned::foo"), HasSubstr("torch_dispatch[strata::(anonymous namespace)::MyMode]"));
    ModeGuard g(std::make_shared<MyMode>());
    foo.call(x);
    EXPECT_EQ(rule_calls, 1);
  }
  EXPECT_TRUE(Dispatcher::singleton().rules(foo.op->operator_name()).empty());
  EXPECT_FALSE(foo.op->hasRules());
  EXPECT_THAT(dump("mode_owned::foo"), ::testing::Not(HasSubstr("torch_dispatch")));
  ModeGuard g(std::make_shared<MyMode>());
  foo.call(x);
  EXPECT_EQ(rule_calls, 1);  // the mode's own handler now
  EXPECT_EQ(foo.kernel_calls, 2);
}

TEST(ModeStack, ModesPushedOnOneThreadDoNotLeakIntoAnother) {
  CountingOp foo("mode_threads");
  const Tensor x = ops::ones({1});
  std::vector<std::string> log;
  ModeGuard g(std::make_shared<RecordingMode>("main", &log));
  bool other_saw_mode_key = true;
  size_t other_stack = 99;
  std::thread t([&] {
    other_saw_mode_key = modeKeyIncluded();
    other_stack = modes::mode_stack_size();
    foo.call(ops::ones({1}));  // ones and foo: neither reaches the main thread's mode
  });
  t.join();
  EXPECT_FALSE(other_saw_mode_key);
  EXPECT_EQ(other_stack, 0u);
  EXPECT_TRUE(log.empty());
  foo.call(x);
  EXPECT_THAT(log, ElementsAre("main:mode_threads::foo"));
  EXPECT_EQ(foo.kernel_calls, 2);
}

// --- Built-in modes on the muladd ops of the extension tutorial. ---

struct MulAddOps {
  MulAddOps() : lib(Library::DEF, "trace_ext") {
    lib.def("mymuladd(Tensor a, Tensor b, float c) -> Tensor");
    lib.def("mymul(Tensor a, Tensor b) -> Tensor");
    lib.def("myadd_out(Tensor a, Tensor b, Tensor(a!) out) -> ()");
    lib.impl("mymuladd", [](const Tensor& a, const Tensor& b, double c) { return ops::add(ops::mul(a, b), c); },
             DispatchKey::CPU);
    lib.impl("mymul", [](const Tensor& a, const Tensor& b) { return ops::mul(a, b); }, DispatchKey::CPU);
    lib.impl("myadd_out", [](const Tensor& a, const Tensor& b, Tensor& out) { out.copy_(ops::add(a, b)); },
             DispatchKey::CPU);
    auto& d = Dispatcher::singleton();
    mymuladd = d.findSchemaOrThrow("trace_ext::mymuladd");
    mymul = d.findSchemaOrThrow("trace_ext::mymul");
    myadd_out = d.findSchemaOrThrow("trace_ext::myadd_out");
  }
  Library lib;
  std::optional<OperatorHandle> mymuladd, mymul, myadd_out;
};

TEST(TraceMode, RecordsTheOpsAsAGraphThatPrintsExportsAndReplays) {
  MulAddOps m;
  auto trace = std::make_shared<modes::TraceMode>();
  const Tensor a = ops::ones({3});
  const Tensor b = ops::full({3}, 2.0);
  Tensor out = ops::zeros({3});
  {
    ModeGuard g(trace);  // the ops' CPU kernels call core:: ops, with the mode off the stack
    Stack s1{a, b, 0.5};
    m.mymuladd->callBoxed(s1);  // %2 = a*b + 0.5
    Stack s2{s1[0], b};
    m.mymul->callBoxed(s2);  // %3 = %2 * b
    Stack s3{s2[0], a, out};
    m.myadd_out->callBoxed(s3);  // out = %3 + a
    EXPECT_TRUE(s3.empty());
  }
  EXPECT_THAT(values(out), ElementsAre(6.f, 6.f, 6.f));
  const modes::TraceGraph g = trace->graph();
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.str(),
            "graph(%0 : float32[3] cpu, %1 : float32[3] cpu, %4 : float32[3] cpu):\n"
            "  %2 : float32[3] cpu = trace_ext::mymuladd(%0, %1, 0.5)\n"
            "  %3 : float32[3] cpu = trace_ext::mymul(%2, %1)\n"
            "  trace_ext::myadd_out(%3, %0, %4)\n"
            "  return ()\n");

  const QJsonObject json = QJsonDocument::fromJson(QByteArray::fromStdString(g.json())).object();
  ASSERT_FALSE(json.isEmpty()) << g.json();
  EXPECT_EQ(json["inputs"].toArray(), (QJsonArray{0, 1, 4}));
  const QJsonArray nodes = json["nodes"].toArray();
  ASSERT_EQ(nodes.size(), 3);
  EXPECT_EQ(nodes[0].toObject()["op"].toString(), "trace_ext::mymuladd");
  EXPECT_EQ(nodes[0].toObject()["args"].toArray()[2].toObject()["constant"].toDouble(), 0.5);
  EXPECT_EQ(nodes[1].toObject()["outputs"].toArray()[0].toObject()["value"].toInt(), 3);
  EXPECT_EQ(json["values"].toArray()[2].toObject()["shape"].toArray(), (QJsonArray{3}));

  // Replay on new inputs, of another shape: out2 = (x*y + 0.5) * y + x.
  const Tensor x = ops::arange(4).to(ScalarType::Float);
  const Tensor y = ops::full({4}, 3.0);
  Tensor out2 = ops::zeros({4});
  const Stack r = g.replay({x, y, out2});
  EXPECT_TRUE(r.empty());  // the graph's last node writes into an input
  EXPECT_THAT(values(out2), ElementsAre(1.5f, 11.5f, 21.5f, 31.5f));
  EXPECT_THAT(errorOf([&] { g.replay({x}); }), HasSubstr("the trace has 3 input(s), but 1 tensor(s) were given"));
}

TEST(TraceMode, ReplayReturnsTheValuesNoLaterNodeUses) {
  MulAddOps m;
  auto trace = std::make_shared<modes::TraceMode>();
  auto typed = m.mymuladd->typed<Tensor(const Tensor&, const Tensor&, double)>();
  const Tensor a = ops::ones({2});
  const Tensor b = ops::ones({2});
  {
    ModeGuard g(trace);
    Tensor t = typed.call(a, b, 1.0);
    typed.call(t, t, 0.0);
  }
  const auto g = trace->graph();
  EXPECT_THAT(g.outputs(), ElementsAre(3));
  const Stack r = g.replay({ops::full({2}, 2.0), ops::full({2}, 3.0)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_THAT(values(r[0].toTensor()), ElementsAre(49.f, 49.f));  // (2*3+1)^2
  trace->clear();
  EXPECT_EQ(trace->numNodes(), 0u);
}

TEST(TraceMode, ReplayOfAnOpThatIsGoneIsAnErrorNamingIt) {
  auto trace = std::make_shared<modes::TraceMode>();
  const Tensor x = ops::ones({2});
  {
    CountingOp foo("trace_gone");
    ModeGuard g(trace);
    foo.call(x);
  }
  EXPECT_THAT(errorOf([&] { trace->graph().replay({x}); }),
              HasSubstr("replay: the trace calls trace_gone::foo, which is no longer registered"));
}

TEST(TraceMode, AFailingOpIsNotRecorded) {
  MulAddOps m;
  auto trace = std::make_shared<modes::TraceMode>();
  Stack s{ops::ones({2}), ops::ones({3})};
  ModeGuard g(trace);
  EXPECT_THAT(errorOf([&] { m.mymul->callBoxed(s); }), HasSubstr("must match"));
  EXPECT_EQ(trace->numNodes(), 0u);
  EXPECT_TRUE(trace->graph().values.empty());
}

TEST(LogMode, OneLinePerOpWithShapesAndTime) {
  MulAddOps m;
  std::vector<std::string> lines;
  auto log = std::make_shared<modes::LogMode>([&](std::string_view l) { lines.emplace_back(l); });
  Stack s{ops::ones({2, 3}), ops::ones({3}), 2.0};
  Stack bad{ops::ones({2}), ops::ones({3})};
  {
    ModeGuard g(log);
    m.mymuladd->callBoxed(s);
    EXPECT_ANY_THROW(m.mymul->callBoxed(bad));
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], ::testing::MatchesRegex(
                            "trace_ext::mymuladd\\(float32\\[2, 3\\] cpu, float32\\[3\\] cpu, 2\\.?0?\\) -> "
                            "\\(float32\\[2, 3\\] cpu\\)  [0-9.]+ (ns|us|ms)"));
  EXPECT_THAT(lines[1], HasSubstr("trace_ext::mymul(float32[2] cpu, float32[3] cpu) raised: "));
}

TEST(LogMode, WithoutASinkOfItsOwnUsesTheProcessSink) {
  MulAddOps m;
  std::vector<std::string> lines;
  modes::set_log_sink([&](std::string_view l) { lines.emplace_back(l); });
  Stack s{ops::ones({1}), ops::ones({1})};
  {
    ModeGuard g(modes::make_mode("log"));
    m.mymul->callBoxed(s);
  }
  modes::set_log_sink(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("trace_ext::mymul(float32[1] cpu, float32[1] cpu) -> (float32[1] cpu)"));
}

TEST(PassthroughMode, CallsTheOpBelowAndCounts) {
  CountingOp foo("mode_pass");
  auto p1 = std::make_shared<modes::PassthroughMode>();
  auto p2 = std::make_shared<modes::PassthroughMode>();
  const Tensor x = ops::full({2}, 4.0);
  Tensor y;
  {
    ModeGuard g1(p1);
    ModeGuard g2(p2);
    y = foo.call(x);
  }
  EXPECT_TRUE(ops::allclose(y, x));
  EXPECT_EQ(p1->calls(), 1u);
  EXPECT_EQ(p2->calls(), 1u);
  EXPECT_EQ(foo.kernel_calls, 1);
}

// A mode on the fallback's own stack: records what it saw, runs the op below in
// place, then doubles the result.
struct DoublingBoxedMode : modes::BoxedDispatchMode {
  void dispatch_boxed(const OperatorHandle& op, Stack& stack) override {
    seen_stack = &stack;
    seen_args = stack.size();
    seen_op = op.name();
    stack_size_inside = modes::mode_stack_size();
    mode_key_inside = modeKeyIncluded();
    autograd_excluded_inside = tls_local_dispatch_key_set().excluded.has(DispatchKey::AutogradCPU);
    if (fail) throw std::runtime_error("boxed mode failed");
    if (drop_results) {
      stack.clear();
      return;
    }
    op.callBoxed(stack);
    stack[0] = ops::mul(stack[0].toTensor(), 2.0);
  }
  std::string name() const override { return "doubling"; }
  const Stack* seen_stack = nullptr;
  size_t seen_args = 0;
  std::string seen_op;
  size_t stack_size_inside = 99;
  bool mode_key_inside = false;
  bool autograd_excluded_inside = false;
  bool fail = false;
  bool drop_results = false;
};

TEST(BoxedDispatchMode, RunsOnTheFallbacksStackUnderTheSameRulesAsDispatch) {
  CountingOp foo("mode_boxed");
  std::vector<std::string> log;
  auto below = std::make_shared<RecordingMode>("below", &log);
  auto boxed = std::make_shared<DoublingBoxedMode>();
  const Tensor x = ops::full({2}, 3.0);
  const RawLocalDispatchKeySet before = strata::detail::tls_local_dispatch_key_set;
  {
    ModeGuard g1(below);
    ModeGuard g2(boxed);
    const Tensor y = foo.call(x);
    EXPECT_EQ(values(y), (std::vector<float>{6, 6}));
    // Off the stack while it ran, the layers above Mode excluded, the mode below next.
    EXPECT_EQ(boxed->seen_op, "mode_boxed::foo");
    EXPECT_EQ(boxed->seen_args, 1u);
    EXPECT_EQ(boxed->stack_size_inside, 1u);
    EXPECT_TRUE(boxed->mode_key_inside);
    EXPECT_TRUE(boxed->autograd_excluded_inside);
    // The op and the handler's own mul reach the mode below, a by-value one that gets its types.
    EXPECT_THAT(log, ElementsAre("below:mode_boxed::foo", "below:core::mul.Scalar"));
    EXPECT_EQ(below->last_types.str(), "(cpu:float32)");
    EXPECT_EQ(modes::current_mode(), boxed);

    // An exception leaves the stack and the TLS sets as they were.
    boxed->fail = true;
    EXPECT_THROW(foo.call(x), std::runtime_error);
    EXPECT_EQ(modes::mode_stack_size(), 2u);
    EXPECT_EQ(modes::current_mode(), boxed);
    boxed->fail = false;

    // What it leaves on the stack is checked against the schema, naming the handler.
    boxed->drop_results = true;
    EXPECT_THAT(errorOf([&] { foo.call(x); }),
                HasSubstr("mode_boxed::foo: the dispatch_boxed() of mode doubling returned 0 value(s)"));
    boxed->drop_results = false;
  }
  EXPECT_EQ(strata::detail::tls_local_dispatch_key_set.included, before.included);
  EXPECT_EQ(strata::detail::tls_local_dispatch_key_set.excluded, before.excluded);
  EXPECT_EQ(foo.kernel_calls, 1);

  // In place: a boxed call's own Stack reaches the handler (the by-value path
  // would hand it another object).
  {
    ModeGuard g(boxed);
    Stack s{x};
    foo.op->callBoxed(s);
    EXPECT_EQ(boxed->seen_stack, &s);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(values(s[0].toTensor()), (std::vector<float>{6, 6}));
  }
  EXPECT_EQ(foo.kernel_calls, 2);

  // Held as a DispatchMode, its by-value dispatch() is the same handler.
  DispatchMode& as_base = *boxed;
  const Stack out = as_base.dispatch(*foo.op, TensorTypes::of({x}), {x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0].toTensor()), (std::vector<float>{6, 6}));
}

struct RuledBoxedMode : modes::BoxedDispatchMode {
  void dispatch_boxed(const OperatorHandle& op, Stack& stack) override {
    ++own_calls;
    op.callBoxed(stack);
  }
  int own_calls = 0;
};

TEST(BoxedDispatchMode, ATorchDispatchRuleForItsTypeRunsInstead) {
  CountingOp foo("mode_boxed_rule");
  const Tensor x = ops::ones({2});
  auto mode = std::make_shared<RuledBoxedMode>();
  ModeGuard g(mode);
  foo.call(x);
  EXPECT_EQ(mode->own_calls, 1);
  int rule_calls = 0;
  {
    auto rule = modes::register_torch_dispatch<RuledBoxedMode>(
        "mode_boxed_rule::foo", [&](RuledBoxedMode&, const OperatorHandle&, const TensorTypes& types, Stack args) {
          ++rule_calls;
          EXPECT_EQ(types.str(), "(cpu:float32)");
          return Stack{ops::add(args[0].toTensor(), 1)};
        });
    EXPECT_EQ(values(foo.call(x)), (std::vector<float>{2, 2}));
  }
  EXPECT_EQ(rule_calls, 1);
  EXPECT_EQ(mode->own_calls, 1);
  foo.call(x);  // the rule is gone: its own handler again
  EXPECT_EQ(mode->own_calls, 2);
  EXPECT_EQ(foo.kernel_calls, 2);
}

TEST(ModeTypes, BuiltinsByNameAndRegisteredTypesWithOwners) {
  std::vector<std::string> names;
  for (const auto& t : modes::mode_types()) names.push_back(t.name);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"trace", "log", "passthrough"}));
  EXPECT_NE(dynamic_cast<modes::TraceMode*>(modes::make_mode("trace").get()), nullptr);
  EXPECT_THAT(errorOf([] { modes::make_mode("nope"); }), HasSubstr("no mode type named 'nope'; known: "));
  {
    RegistrationOwnerGuard owner("mybundle@2.0.0");
    Library lib(Library::IMPL, "_");
    modes::register_mode_type("my_mode", "mine", [] { return std::make_shared<MyMode>(); }, lib);
    bool found = false;
    for (const auto& t : modes::mode_types()) {
      if (t.name != "my_mode") continue;
      found = true;
      EXPECT_EQ(t.owner, "mybundle@2.0.0");
      EXPECT_THAT(t.debug, HasSubstr("modes_test.cc:"));
    }
    EXPECT_TRUE(found);
    EXPECT_NE(dynamic_cast<MyMode*>(modes::make_mode("my_mode").get()), nullptr);
    EXPECT_THAT(errorOf([] { auto h = modes::register_mode_type("my_mode", "", [] { return nullptr; }); }),
                HasSubstr("a mode type named 'my_mode' is already registered by 'mybundle@2.0.0'"));
  }
  EXPECT_THAT(errorOf([] { modes::make_mode("my_mode"); }), HasSubstr("no mode type named 'my_mode'"));
  EXPECT_THAT(errorOf([] { auto h = modes::register_mode_type("bad name", "", [] { return nullptr; }); }),
              HasSubstr("invalid mode type name 'bad name'"));
  EXPECT_THAT(errorOf([] { auto h = modes::register_mode_type("empty_factory", "", nullptr); }),
              HasSubstr("mode type 'empty_factory' (registered at "));
  EXPECT_THAT(errorOf([] { auto h = modes::register_mode_type("empty_factory", "", nullptr); }),
              HasSubstr(") has no factory"));
  auto null_factory = modes::register_mode_type("null_mode", "", [] { return nullptr; });
  EXPECT_THAT(errorOf([] { modes::make_mode("null_mode"); }), HasSubstr("returned null"));
}

}  // namespace
}  // namespace strata
