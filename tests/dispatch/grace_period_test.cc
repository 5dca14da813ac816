// Retired kernels are freed after a grace period (Note [Grace periods]): never while
// a call may still be inside them, and without anyone calling reclaim by hand.
// Run under ThreadSanitizer by the TSan job (ctest -L concurrency in build-tsan).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// Without a process-wide barrier nothing is freed (Note [Grace periods]).
#define SKIP_WITHOUT_BARRIER()                                                     \
  if (!detail::retiredKernelsAreFreed()) GTEST_SKIP() << "no membarrier here: retired kernels are kept"

// A kernel whose captures tell when they are freed and which can hold a call inside
// it until released.
struct Gate {
  std::atomic<bool> inside{false};
  std::atomic<bool> open{false};
};

void waitFor(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!flag.load()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "timed out";
    std::this_thread::sleep_for(100us);
  }
}

class GracePeriods : public ::testing::TestWithParam<bool> {};

TEST_P(GracePeriods, AKernelRemovedWhileACallIsInsideItIsFreedOnlyWhenTheCallLeaves) {
  SKIP_WITHOUT_BARRIER();
  const bool boxed = GetParam();
  Library def(Library::DEF, boxed ? "gp_boxed" : "gp_unboxed");
  def.def("hold(Tensor x) -> int");
  const std::string name = boxed ? "gp_boxed::hold" : "gp_unboxed::hold";
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow(name);

  auto gate = std::make_shared<Gate>();
  auto sentinel = std::make_shared<int>(7);
  std::weak_ptr<int> freed = sentinel;
  auto impl = std::make_unique<Library>(Library::IMPL, boxed ? "gp_boxed" : "gp_unboxed", DispatchKey::CPU);
  impl->impl("hold", [gate, sentinel](const Tensor&) {
    gate->inside = true;
    while (!gate->open.load()) std::this_thread::sleep_for(100us);
    return int64_t{*sentinel};  // reads the captures after its registration is gone
  });
  sentinel.reset();

  std::atomic<int64_t> result{0};
  std::thread caller([&] {
    const Tensor x = ones({1});
    if (boxed) {
      Stack s{x};
      op.callBoxed(s);
      result = s.at(0).toInt();
    } else {
      result = op.typed<int64_t(const Tensor&)>().call(x);
    }
  });
  waitFor(gate->inside);

  impl.reset();  // deregistered while the call is inside the kernel; tries to reclaim
  for (int i = 0; i < 20; ++i) {
    Dispatcher::singleton().reclaimRetiredKernels();
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_FALSE(freed.expired()) << "freed while a call was inside it";
  EXPECT_GE(Dispatcher::singleton().numRetiredKernels(), 1u);

  gate->open = true;
  caller.join();
  EXPECT_EQ(result.load(), 7);
  EXPECT_GE(Dispatcher::singleton().reclaimRetiredKernels(), 1u);
  EXPECT_TRUE(freed.expired()) << "still kept after the call left";
  EXPECT_EQ(Dispatcher::singleton().numRetiredKernels(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Calls, GracePeriods, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Boxed" : "Unboxed"; });

TEST(GracePeriod, ACallScopeKeepsARulePayloadAliveUntilItEnds) {
  SKIP_WITHOUT_BARRIER();
  Library def(Library::DEF, "gp_scope");
  def.def("f(Tensor x) -> Tensor");
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("gp_scope::f");
  struct Target {};
  auto payload = std::make_shared<const int>(42);
  std::weak_ptr<const int> freed = payload;
  auto rule = std::make_unique<RegistrationHandleRAII>(Dispatcher::singleton().registerRule(
      op.operator_name(), "test_rule", typeid(Target), std::shared_ptr<const void>(payload), {"test", "here"}));
  payload.reset();

  std::atomic<bool> read{false}, done{false};
  std::atomic<int> seen{0};
  std::thread reader([&] {
    const CallScope keep;
    const auto* p = static_cast<const int*>(op.findRule("test_rule", typeid(Target)));
    read = true;
    waitFor(done);
    seen = *p;
  });
  waitFor(read);
  rule.reset();  // removed while the reader holds its payload
  Dispatcher::singleton().reclaimRetiredKernels();
  EXPECT_FALSE(freed.expired());
  done = true;
  reader.join();
  EXPECT_EQ(seen.load(), 42);
  Dispatcher::singleton().reclaimRetiredKernels();
  EXPECT_TRUE(freed.expired());
}

// Calls from a thread_local's destructor, made while its thread exits.
struct CallsAtExit {
  const TypedOperatorHandle<int64_t(int64_t)>* f = nullptr;
  ~CallsAtExit() {
    if (f != nullptr) f->call(2);
  }
};
thread_local CallsAtExit calls_at_exit;

TEST(GracePeriod, ThreadsThatCalledAndExitedLeaveTheRegistryAndHoldNothingBack) {
  SKIP_WITHOUT_BARRIER();
  Library def(Library::DEF, "gp_exit");
  def.def("f(int x) -> int");
  def.impl("f", [](int64_t x) { return x; }, "default");
  auto impl = std::make_unique<Library>(Library::IMPL, "gp_exit", DispatchKey::CPU);
  def.def("g(Tensor x) -> int");
  auto sentinel = std::make_shared<int>(1);
  std::weak_ptr<int> freed = sentinel;
  impl->impl("g", [sentinel](const Tensor&) { return int64_t{*sentinel}; });
  sentinel.reset();
  const auto f = Dispatcher::singleton().findSchemaOrThrow("gp_exit::f").typed<int64_t(int64_t)>();
  const auto g = Dispatcher::singleton().findSchemaOrThrow("gp_exit::g").typed<int64_t(const Tensor&)>();
  const size_t before = detail::registeredCallingThreads();
  for (int i = 0; i < 8; ++i) std::thread([&] { EXPECT_EQ(g.call(ones({1})), 1); }).join();
  // The thread_local is made before the thread's first call, so it is destroyed
  // after anything that call set up; its call at exit must still be seen and undone.
  for (int i = 0; i < 8; ++i) {
    std::thread([&] {
      calls_at_exit.f = &f;
      EXPECT_EQ(f.call(1), 1);
    }).join();
  }
  EXPECT_EQ(detail::registeredCallingThreads(), before);
  impl.reset();  // the removal frees it at once: nobody is inside a call
  EXPECT_TRUE(freed.expired());
  EXPECT_EQ(Dispatcher::singleton().numRetiredKernels(), 0u);
}

TEST(GracePeriod, ACallFromAThreadKeyDestructorIsSeenAndUndone) {
  Library def(Library::DEF, "gp_key");
  def.def("f(int x) -> int");
  def.impl("f", [](int64_t x) { return x; }, "default");
  static TypedOperatorHandle<int64_t(int64_t)>* f = nullptr;
  auto handle = Dispatcher::singleton().findSchemaOrThrow("gp_key::f").typed<int64_t(int64_t)>();
  f = &handle;
  detail::registeredCallingThreads();  // the registry (and its key) exists first
  pthread_key_t key;
  ASSERT_EQ(pthread_key_create(&key, [](void*) { f->call(3); }), 0);
  const size_t before = detail::registeredCallingThreads();
  for (int i = 0; i < 4; ++i) {
    std::thread([&] {
      EXPECT_EQ(f->call(1), 1);
      pthread_setspecific(key, &key);  // its destructor runs after the registry's
    }).join();
  }
  EXPECT_EQ(detail::registeredCallingThreads(), before);
  pthread_key_delete(key);
}

TEST(GracePeriod, AForkedChildKeepsOnlyItsOwnThreadAndFrees) {
  SKIP_WITHOUT_BARRIER();
  Library def(Library::DEF, "gp_fork");
  def.def("hold(Tensor x) -> int");
  def.def("f(Tensor x) -> int");
  auto gate = std::make_shared<Gate>();
  def.impl("hold", [gate](const Tensor&) {
    gate->inside = true;
    while (!gate->open.load()) std::this_thread::sleep_for(100us);
    return int64_t{0};
  }, "default");
  const auto hold = Dispatcher::singleton().findSchemaOrThrow("gp_fork::hold").typed<int64_t(const Tensor&)>();
  std::thread blocked([&] { hold.call(ones({1})); });  // inside a call across the fork
  waitFor(gate->inside);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only this thread exists here: a removal frees at once, with no deadlock.
    int ok = detail::registeredCallingThreads() <= 1 ? 0 : 2;
    {
      Library cpu(Library::IMPL, "gp_fork", DispatchKey::CPU);
      cpu.impl("f", [](const Tensor&) { return int64_t{1}; });
    }
    if (Dispatcher::singleton().numRetiredKernels() != 0) ok = 3;
    _exit(ok);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  gate->open = true;
  blocked.join();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: other threads kept in the child's registry; 3: not freed";
}

// A batch another thread holds across a fork has no thread to end it in the child:
// the child ends it (publishing what it staged), and the child's own batch opens
// rather than wait forever.
TEST(GracePeriod, AForkedChildIsNotHeldByAnotherThreadsBatch) {
  Library def(Library::DEF, "gp_fork_batch");
  std::atomic<bool> holding{false}, release{false};
  std::thread holder([&] {
    RegistrationBatch batch;
    def.def("staged(Tensor x) -> Tensor");  // published when the batch ends
    holding = true;
    while (!release.load()) std::this_thread::sleep_for(100us);
  });
  waitFor(holding);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a hang fails the test rather than stall it
    int ok = 0;
    {
      RegistrationBatch mine;  // waited for a thread that is not here, before
      if (strata::detail::registrationBatchHeldByThisThread() != true) ok = 2;
    }
    if (!Dispatcher::singleton().findSchema(parseOperatorName("gp_fork_batch::staged")).has_value()) ok = 3;
    _exit(ok);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  release = true;
  holder.join();
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit (killed by its alarm: it hung)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: the batch was not this thread's; 3: the staged def was lost";
}

// A thread that makes long calls back to back is almost never between calls; its
// next call (a new generation) shows it left the one it was in.
TEST(GracePeriod, AThreadMakingLongCallsBackToBackHoldsBackOnlyItsCurrentCall) {
  SKIP_WITHOUT_BARRIER();
  Library def(Library::DEF, "gp_long");
  def.def("slow(Tensor x) -> int");
  def.def("f(Tensor x) -> int");
  def.impl("slow", [](const Tensor&) {
    std::this_thread::sleep_for(2ms);
    return int64_t{0};
  }, "default");
  auto impl = std::make_unique<Library>(Library::IMPL, "gp_long", DispatchKey::CPU);
  auto sentinel = std::make_shared<int>(1);
  std::weak_ptr<int> freed = sentinel;
  impl->impl("f", [sentinel](const Tensor&) { return int64_t{*sentinel}; });
  sentinel.reset();
  const auto slow = Dispatcher::singleton().findSchemaOrThrow("gp_long::slow").typed<int64_t(const Tensor&)>();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0};
  std::thread busy([&] {
    const Tensor x = ones({1});
    while (!stop.load()) {
      slow.call(x);
      calls.fetch_add(1);
    }
  });
  while (calls.load() < 2) std::this_thread::sleep_for(100us);
  impl.reset();  // the busy thread is inside a call: it waits (see the tests above)
  // Two more calls started: the call it was in at the removal has ended, though the
  // thread was between calls only for nanoseconds.
  const int64_t at_removal = calls.load();
  while (calls.load() < at_removal + 2) std::this_thread::sleep_for(100us);
  EXPECT_GE(Dispatcher::singleton().reclaimRetiredKernels(), 1u);
  EXPECT_TRUE(freed.expired()) << "held back while the thread kept calling";
  stop = true;
  busy.join();
}

// Memory stays bounded with no explicit reclaim while a thread never stops calling:
// the removals free what earlier removals retired, as the caller passes between calls.
TEST(GracePeriod, RemovalsFreeWhatTheyRetireWhileAnotherThreadKeepsCalling) {
  SKIP_WITHOUT_BARRIER();
  Library def(Library::DEF, "gp_loop");
  def.def("f(Tensor x) -> int");
  def.impl("f", [](const Tensor&) { return int64_t{0}; }, "default");
  const auto f = Dispatcher::singleton().findSchemaOrThrow("gp_loop::f").typed<int64_t(const Tensor&)>();

  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0};
  std::atomic<int> bad{0};
  std::thread caller([&] {
    const Tensor x = ones({1});
    while (!stop.load(std::memory_order_relaxed)) {
      const int64_t r = f.call(x);
      if (r != 0 && r != 1) bad.fetch_add(1);
      calls.fetch_add(1, std::memory_order_relaxed);
    }
  });
  while (calls.load() < 100) std::this_thread::yield();

  constexpr int kCycles = 5000;
  std::atomic<int> live{0};
  size_t most = 0;
  for (int i = 0; i < kCycles; ++i) {
    auto counted = std::shared_ptr<int>(new int(1), [&live](int* p) {
      live.fetch_sub(1);
      delete p;
    });
    live.fetch_add(1);
    Library cpu(Library::IMPL, "gp_loop", DispatchKey::CPU);
    cpu.impl("f", [counted](const Tensor&) { return int64_t{*counted}; });
    counted.reset();
    most = std::max(most, Dispatcher::singleton().numRetiredKernels());
  }
  // The caller is still calling: what is left is freed within a few attempts.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (live.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    Dispatcher::singleton().reclaimRetiredKernels();
    std::this_thread::sleep_for(1ms);
  }
  const int left_while_calling = live.load();
  stop = true;
  caller.join();
  std::printf("%d removals under a calling thread (%lld calls): at most %zu retired at once, %d left\n", kCycles,
              static_cast<long long>(calls.load()), most, left_while_calling);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(left_while_calling, 0);
  EXPECT_LT(most, static_cast<size_t>(kCycles) / 2) << "removals did not free what they retired";
  Dispatcher::singleton().reclaimRetiredKernels();
  EXPECT_EQ(live.load(), 0);
  EXPECT_EQ(Dispatcher::singleton().numRetiredKernels(), 0u);
}

}  // namespace
}  // namespace strata
