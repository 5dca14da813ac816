// Calls on several threads while another thread registers, deregisters and toggles.
// Run under ThreadSanitizer by the TSan job (ctest -L concurrency in build-tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "strata/strata.h"

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

TEST(Concurrency, TlsSetsAreThreadLocal) {
  IncludeDispatchKeyGuard g(DispatchKey::AutocastCPU);
  bool other_has = true;
  std::thread([&] { other_has = tls_local_dispatch_key_set().included.has(DispatchKey::AutocastCPU); }).join();
  EXPECT_FALSE(other_has);
  EXPECT_TRUE(tls_local_dispatch_key_set().included.has(DispatchKey::AutocastCPU));
}

}  // namespace
}  // namespace strata
