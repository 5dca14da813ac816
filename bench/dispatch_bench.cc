// Dispatch overhead: the scenarios of ../shared/anchors/libtorch_dispatch under the
// names issue 6 fixes, so results compare across commits and pair with
// libtorch_bench.cc's "libtorch/..." runs (`strata bench --peer libtorch`).
#include <benchmark/benchmark.h>

#include "bench_ops.h"

namespace strata::bench {

Tensor ident_cpu(const Tensor& x) { return x; }

namespace {

Tensor muladd_cpu(const Tensor& a, const Tensor&, double) { return a; }

Library& benchLibrary() {
  // Leaked: the handles below outlive static destruction.
  static Library* lib = [] {
    auto* l = new Library(Library::DEF, "bench");
    l->def("ident(Tensor x) -> Tensor");
    l->def("muladd(Tensor a, Tensor b, float c) -> Tensor");
    l->impl("ident", &ident_cpu, DispatchKey::CPU);
    l->impl("muladd", &muladd_cpu, DispatchKey::CPU);
    return l;
  }();
  return *lib;
}

}  // namespace

const TypedOperatorHandle<IdentSig>& identOp() {
  benchLibrary();
  static const auto op = Dispatcher::singleton().findSchemaOrThrow("bench::ident", "").typed<IdentSig>();
  return op;
}
const TypedOperatorHandle<MulAddSig>& muladdOp() {
  benchLibrary();
  static const auto op = Dispatcher::singleton().findSchemaOrThrow("bench::muladd", "").typed<MulAddSig>();
  return op;
}

namespace {

void direct_call(benchmark::State& s) {
  const Tensor x = ones({4});
  auto* volatile fn = &ident_cpu;
  for (auto _ : s) benchmark::DoNotOptimize(fn(x));
}
BENCHMARK(direct_call)->Name("direct_call");

void unboxed_ident(benchmark::State& s) {
  const auto& op = identOp();
  const Tensor x = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(op.call(x));
}
BENCHMARK(unboxed_ident)->Name("unboxed/ident");

void unboxed_ident_grad(benchmark::State& s) {
  const auto& op = identOp();
  Tensor x = ones({4});
  x.set_requires_grad(true);  // {AutogradCPU, CPU}; AutogradCPU falls through
  for (auto _ : s) benchmark::DoNotOptimize(op.call(x));
}
BENCHMARK(unboxed_ident_grad)->Name("unboxed/ident_grad_fallthrough");

void unboxed_muladd(benchmark::State& s) {
  const auto& op = muladdOp();
  const Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd)->Name("unboxed/muladd");

// The stack is built on every call, as generic code (and the PyTorch anchor) does.
void boxed_muladd(benchmark::State& s) {
  const OperatorHandle op = muladdOp();
  const Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) {
    Stack st{a, b, 2.0};
    op.callBoxed(st);
    benchmark::DoNotOptimize(st);
  }
}
BENCHMARK(boxed_muladd)->Name("boxed/muladd");

void unboxed_muladd_autocast(benchmark::State& s) {
  const auto& op = muladdOp();
  const Tensor a = ones({4}), b = ones({4});
  IncludeDispatchKeyGuard on(DispatchKey::AutocastCPU);  // autocast on; the op has no rule
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd_autocast)->Name("unboxed/muladd_autocast_on_no_rule");

// One boxed fallback layer that redispatches below itself, the C++ analogue of one
// dispatch-mode layer. PrivateUse1 keeps it clear of the Mode key's own fallback.
void passthrough(const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  op.redispatchBoxed(ks & keysBelow(DispatchKey::PrivateUse1), stack);
}
void unboxed_muladd_one_boxed_layer(benchmark::State& s) {
  const auto& op = muladdOp();
  Library layer(Library::IMPL, "_", DispatchKey::PrivateUse1);
  layer.fallback(CppFunction::makeFromBoxedFunction<&passthrough>());
  const Tensor a = ones({4}), b = ones({4});
  IncludeDispatchKeyGuard on(DispatchKey::PrivateUse1);
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd_one_boxed_layer)->Name("unboxed/muladd_one_boxed_layer");

// Each thread its own tensors, as threads serving different requests have: what is
// shared is the operator and its table, which calls only read.
void threads_unboxed_muladd(benchmark::State& s) {
  const auto& op = muladdOp();
  const Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
  s.SetItemsProcessed(s.iterations());
}
BENCHMARK(threads_unboxed_muladd)->Name("threads/unboxed_muladd")->Threads(1)->Threads(2)->UseRealTime();

void core_add_small(benchmark::State& s) {
  const Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(ops::add(a, b));
}
BENCHMARK(core_add_small)->Name("core/add_4");

}  // namespace
}  // namespace strata::bench
