// Dispatch overhead: the scenarios of ../shared/anchors/libtorch_dispatch, under the
// names issue 6 fixes so results compare across commits (the full suite, threads,
// mode stacks and the registry benchmarks come with that issue).
#include <benchmark/benchmark.h>

#include "strata/strata.h"

namespace {

using namespace strata;

Tensor ident_cpu(const Tensor& x) { return x; }
Tensor muladd_cpu(const Tensor& a, const Tensor&, double) { return a; }

Library& benchLibrary() {
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
const TypedOperatorHandle<Tensor(const Tensor&)>& identOp() {
  benchLibrary();
  static const auto op = Dispatcher::singleton().findSchemaOrThrow("bench::ident", "").typed<Tensor(const Tensor&)>();
  return op;
}
const TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, double)>& muladdOp() {
  benchLibrary();
  static const auto op = Dispatcher::singleton()
                             .findSchemaOrThrow("bench::muladd", "")
                             .typed<Tensor(const Tensor&, const Tensor&, double)>();
  return op;
}

void direct_call(benchmark::State& s) {
  Tensor x = ones({4});
  auto* volatile fn = &ident_cpu;
  for (auto _ : s) benchmark::DoNotOptimize(fn(x));
}
BENCHMARK(direct_call)->Name("direct_call");

void unboxed_ident(benchmark::State& s) {
  const auto& op = identOp();
  Tensor x = ones({4});
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
  Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd)->Name("unboxed/muladd");

void boxed_muladd(benchmark::State& s) {
  const OperatorHandle op = muladdOp();
  Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) {
    Stack st{a, b, 2.0};
    op.callBoxed(st);
    benchmark::DoNotOptimize(st);
  }
}
BENCHMARK(boxed_muladd)->Name("boxed/muladd");

void unboxed_muladd_autocast(benchmark::State& s) {
  const auto& op = muladdOp();
  Tensor a = ones({4}), b = ones({4});
  IncludeDispatchKeyGuard on(DispatchKey::AutocastCPU);  // autocast on; the op has no rule
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd_autocast)->Name("unboxed/muladd_autocast_on_no_rule");

void passthrough(const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  op.redispatchBoxed(ks & keysBelow(DispatchKey::PrivateUse1), stack);
}
void unboxed_muladd_one_boxed_layer(benchmark::State& s) {
  const auto& op = muladdOp();
  Library layer(Library::IMPL, "_", DispatchKey::PrivateUse1);
  layer.fallback(CppFunction::makeFromBoxedFunction<&passthrough>());
  Tensor a = ones({4}), b = ones({4});
  IncludeDispatchKeyGuard on(DispatchKey::PrivateUse1);
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd_one_boxed_layer)->Name("unboxed/muladd_one_boxed_layer");

void find_op(benchmark::State& s) {
  benchLibrary();
  const OperatorName name{"bench::muladd", ""};
  for (auto _ : s) benchmark::DoNotOptimize(Dispatcher::singleton().findSchema(name));
}
BENCHMARK(find_op)->Name("registry/find_op");

void core_add_small(benchmark::State& s) {
  Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(ops::add(a, b));
}
BENCHMARK(core_add_small)->Name("core/add_4");

}  // namespace
