// Calls on several threads while another thread registers, deregisters and toggles.
// Run under ThreadSanitizer by the TSan job (ctest -L concurrency in build-tsan).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "strata/strata.h"
#include "test_util.h"

namespace strata {
namespace {

TEST(Concurrency, DispatchWhileRegisteringDeregisteringAndToggling) {
  Library def(Library::DEF, "conc");
  def.def("f(Tensor x) -> int");
  // The default kernel is always there, so every call has a kernel to reach.
  def.impl("f", [](const Tensor&) { return int64_t{0}; }, "default");
  const auto f = Dispatcher::singleton().findSchemaOrThrow("conc::f").typed<int64_t(const Tensor&)>();
  const OperatorHandle boxed = Dispatcher::singleton().findSchemaOrThrow("conc::f");

  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&, t] {
      const Tensor x = ones({1});
      while (!stop.load(std::memory_order_relaxed)) {
        int64_t r;
        if (t == 0) {
          Stack s{x};
          boxed.callBoxed(s);
          r = s.at(0).toInt();
        } else {
          r = f.call(x);
        }
        if (r < 0 || r > 3) bad.fetch_add(1);
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  for (int i = 0; i < 300; ++i) {
    {
      Library cpu(Library::IMPL, "conc", DispatchKey::CPU);
      cpu.impl("f", [](const Tensor&) { return int64_t{1}; });
      cpu.impl("f", [i](const Tensor&) { return int64_t{2 + (i % 2)}; }, DispatchKey::CPU,
               ImplOptions{.allow_override = true});  // stacks on the first
      set_kernel_enabled("conc::f", "cpu", i % 3 != 0);
      set_kernel_enabled("conc::f", "cpu", true);
    }  // both deregistered
    Library fb(Library::IMPL, "_", DispatchKey::PrivateUse1);
    fb.fallback(CppFunction::makeFallthrough());
  }
  while (calls.load() < 1000) std::this_thread::yield();
  stop = true;
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(f.call(ones({1})), 0);
  Dispatcher::singleton().reclaimRetiredKernels();  // every caller has stopped
  EXPECT_EQ(Dispatcher::singleton().numRetiredKernels(), 0u);
}

// Note [Lock-free operator lookup]: names are found without the registry's lock
// while another thread defines thousands of ops (the table grows several times
// under the readers) and removes and re-adds a def.
TEST(Concurrency, FindSchemaWhileDefiningThousandsOfOps) {
  constexpr int kOps = 5000;
  std::atomic<int> defined{0};
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<int64_t> found{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      auto& d = Dispatcher::singleton();
      uint64_t i = static_cast<uint64_t>(t);
      while (!stop.load(std::memory_order_relaxed)) {
        const int n = defined.load(std::memory_order_acquire);
        if (n == 0) continue;
        const int k = static_cast<int>(i++ % static_cast<uint64_t>(n));
        // Every op below `defined` stays defined, and is found; one never defined is not.
        auto h = d.findSchema(OperatorName{"lookup_conc::op" + std::to_string(k), ""});
        if (!h || h->schema().name() != "lookup_conc::op" + std::to_string(k)) bad.fetch_add(1);
        if (d.findSchema(OperatorName{"lookup_conc::never" + std::to_string(k), ""})) bad.fetch_add(1);
        found.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  Library lib(Library::DEF, "lookup_conc");
  for (int i = 0; i < kOps; ++i) {
    lib.def("op" + std::to_string(i) + "(Tensor x) -> Tensor");
    defined.store(i + 1, std::memory_order_release);
  }
  {
    // A def that comes and goes: found while it is there, not after.
    Library frag(Library::FRAGMENT, "lookup_conc");
    frag.def("transient(Tensor x) -> Tensor");
    EXPECT_TRUE(Dispatcher::singleton().findSchema(OperatorName{"lookup_conc::transient", ""}).has_value());
  }
  EXPECT_FALSE(Dispatcher::singleton().findSchema(OperatorName{"lookup_conc::transient", ""}).has_value());
  while (found.load() < 20000) std::this_thread::yield();
  stop.store(true);
  for (auto& r : readers) r.join();
  EXPECT_EQ(bad.load(), 0);
  // Overloads are told apart.
  lib.def("op0.other(Tensor x) -> Tensor");
  EXPECT_EQ(Dispatcher::singleton().findSchema(OperatorName{"lookup_conc::op0", "other"})->schema().overload_name(),
            "other");
}

TEST(Concurrency, TlsSetsAreThreadLocal) {
  IncludeDispatchKeyGuard g(DispatchKey::AutocastCPU);
  bool other_has = true;
  std::thread([&] { other_has = tls_local_dispatch_key_set().included.has(DispatchKey::AutocastCPU); }).join();
  EXPECT_FALSE(other_has);
  EXPECT_TRUE(tls_local_dispatch_key_set().included.has(DispatchKey::AutocastCPU));
}

// Note [Registration batches]: a batch that takes a def down and puts it up again (a
// bundle's next version) never shows another thread the op missing; its schema,
// kernels and rules change at the batch's end. A def with another schema shows the
// new schema with no kernel until its own kernels come, never the old kernel.
TEST(Concurrency, ABatchSwapsAnOpsDefinitionWithoutAGap) {
  struct Probe {};
  auto callFrom = [](std::vector<IValue> args) {  // on another thread, as a caller would
    std::string out;
    std::thread([&] {
      try {
        Stack s;
        for (auto& a : args) s.push_back(a);
        Dispatcher::singleton().findSchemaOrThrow("swapns::f").callBoxed(s);
        out = std::to_string(static_cast<int>(s[0].toTensor().item().toDouble()));
      } catch (const Error& e) {
        out = e.what();
      }
    }).join();
    return out;
  };
  auto ruleSeen = [] {
    bool seen = false;
    std::thread([&] { seen = Dispatcher::singleton().findSchemaOrThrow("swapns::f").findRule("swap_rule", typeid(Probe)) != nullptr; }).join();
    return seen;
  };
  auto version = [](double v) {
    auto lib = std::make_unique<Library>(Library::DEF, "swapns");
    lib->def("f(Tensor x) -> Tensor");
    lib->impl("f", [v](const Tensor&) -> Tensor { return full({1}, v); }, DispatchKey::CPU);
    return lib;
  };
  auto v1 = version(1);
  auto rule = Dispatcher::singleton().registerRule(parseOperatorName("swapns::f"), "swap_rule", typeid(Probe),
                                                   std::make_shared<int>(1), {"test", "a rule"});
  ASSERT_EQ(callFrom({ones({1})}), "1");
  std::unique_ptr<Library> v2;
  {
    RegistrationBatch batch;
    v1.reset();
    rule = {};
    EXPECT_EQ(callFrom({ones({1})}), "1");  // the old def, kernel and rule stay up
    EXPECT_TRUE(ruleSeen());
    // ... for other threads: this one, registering the next version, no longer finds
    // the def it took down, so nothing can be hung on an op about to go.
    EXPECT_FALSE(Dispatcher::singleton().findSchema(parseOperatorName("swapns::f")).has_value());
    bool other_finds = false;
    std::thread([&] { other_finds = Dispatcher::singleton().findSchema(parseOperatorName("swapns::f")).has_value(); })
        .join();
    EXPECT_TRUE(other_finds);
    v2 = version(2);
    EXPECT_TRUE(Dispatcher::singleton().findSchema(parseOperatorName("swapns::f")).has_value());
    EXPECT_EQ(callFrom({ones({1})}), "1");
    EXPECT_TRUE(ruleSeen());
  }
  EXPECT_EQ(callFrom({ones({1})}), "2");
  EXPECT_FALSE(ruleSeen());
  std::unique_ptr<Library> v3;
  rule = Dispatcher::singleton().registerRule(parseOperatorName("swapns::f"), "swap_rule", typeid(Probe),
                                              std::make_shared<int>(2), {"test", "v2's rule"});
  {
    RegistrationBatch batch;
    v2.reset();
    rule = {};
    EXPECT_TRUE(ruleSeen());  // staged: v2's rule is still what calls see
    v3 = std::make_unique<Library>(Library::DEF, "swapns");
    v3->def("f(Tensor x, int n) -> Tensor");
    // The new schema is up at once, with no kernel and no rule of v2's: v2's kernel
    // is never called with n.
    EXPECT_FALSE(ruleSeen());
    EXPECT_THAT(callFrom({ones({1}), IValue(int64_t{3})}), ::testing::HasSubstr("no kernel"));
    v3->impl("f", [](const Tensor&, int64_t n) -> Tensor { return full({1}, static_cast<double>(n)); },
             DispatchKey::CPU);
    EXPECT_THAT(callFrom({ones({1}), IValue(int64_t{3})}), ::testing::HasSubstr("no kernel"));
  }
  EXPECT_EQ(callFrom({ones({1}), IValue(int64_t{3})}), "3");
}

}  // namespace
}  // namespace strata
