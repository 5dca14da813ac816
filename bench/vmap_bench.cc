// The vmap layer on 4-element rows, B of them: a custom op with a batching rule in the
// typed form (register_vmap<Sig>, as muladd 1.1.0 ships one), the same rule in the
// boxed form (in_dims and a Stack), the op without one (the for-loop fallback: B calls
// and a stack), the op called plainly on the same [B, 4] data (what the rule's one
// call costs: the layer's overhead is vmap/muladd_rule/B minus it), and a nested vmap
// 2x8. Each vmapped call's result is dropped before the next, as the plain call's is.
// The ops compute a*b+c into a new tensor, as a kernel does. Paired with PyTorch's
// functorch.vmap in Python (../shared/anchors/python_layers:
// python_vmap_muladd_rule_B{8,64}_ns) by `strata bench --python-anchors FILE`.
#include <benchmark/benchmark.h>

#include "bench_ops.h"
#include "strata/modes/log_mode.h"
#include "strata/modes/vmap.h"
#include "vmap_muladd.h"

namespace strata::bench {
namespace {

struct VmapOps {
  TypedOperatorHandle<VmSig> with_rule;
  TypedOperatorHandle<VmSig> with_boxed_rule;
  TypedOperatorHandle<VmSig> without_rule;
};

// bench_vm::muladd (a batching rule, as muladd 1.1.0's) and bench_vm::muladd_loop
// (none); leaked, as every bench op: they outlive static destruction.
const VmapOps& vmapOps() {
  static const VmapOps ops = [] {
    modes::set_warning_sink([](std::string_view) {});  // the fallback's one warning
    auto* lib = new Library(Library::DEF, "bench_vm");
    lib->def("muladd(Tensor a, Tensor b, float c) -> Tensor");
    lib->def("muladd_boxed(Tensor a, Tensor b, float c) -> Tensor");
    lib->def("muladd_loop(Tensor a, Tensor b, float c) -> Tensor");
    lib->impl("muladd", &muladd_vm_cpu, DispatchKey::CPU);
    lib->impl("muladd_boxed", &muladd_vm_cpu, DispatchKey::CPU);
    lib->impl("muladd_loop", &muladd_vm_cpu, DispatchKey::CPU);
    Dispatcher& d = Dispatcher::singleton();
    auto op = d.findSchemaOrThrow("bench_vm::muladd", "").typed<VmSig>();
    auto boxed = d.findSchemaOrThrow("bench_vm::muladd_boxed", "").typed<VmSig>();
    modes::register_vmap<VmSig>("bench_vm::muladd", muladdTypedVmapRule(op), *lib);
    modes::register_vmap("bench_vm::muladd_boxed", muladdVmapRule(boxed), *lib);
    return VmapOps{op, boxed, d.findSchemaOrThrow("bench_vm::muladd_loop", "").typed<VmSig>()};
  }();
  return ops;
}

void runVmapped(benchmark::State& s, const TypedOperatorHandle<VmSig>& op) {
  const int64_t b = s.range(0);
  const Tensor x = ones({b, 4}), y = ones({b, 4});
  const auto f = modes::vmap([&op](const Tensor& p, const Tensor& q) { return op.call(p, q, 2.0); });
  for (auto _ : s) benchmark::DoNotOptimize(f(x, y));
  const Tensor out = f(x, y);
  if (out.dim() != 2 || out.sizes()[0] != b || out.sizes()[1] != 4) s.SkipWithError("vmap gave the wrong shape");
}

void vmap_muladd_rule(benchmark::State& s) { runVmapped(s, vmapOps().with_rule); }
void vmap_muladd_boxed_rule(benchmark::State& s) { runVmapped(s, vmapOps().with_boxed_rule); }
void vmap_muladd_fallback(benchmark::State& s) { runVmapped(s, vmapOps().without_rule); }

// The rule's work without the layer: one plain call on the [B, 4] data.
void vmap_muladd_plain(benchmark::State& s) {
  const auto& op = vmapOps().with_rule;
  const Tensor x = ones({s.range(0), 4}), y = ones({s.range(0), 4});
  for (auto _ : s) benchmark::DoNotOptimize(op.call(x, y, 2.0));
}

void vmap_nested_2x8(benchmark::State& s) {
  const auto& op = vmapOps().with_rule;
  const Tensor x = ones({2, 8, 4}), y = ones({2, 8, 4});
  const auto f = modes::vmap(modes::vmap([&op](const Tensor& p, const Tensor& q) { return op.call(p, q, 2.0); }));
  Tensor out;
  for (auto _ : s) benchmark::DoNotOptimize(out = f(x, y));
  if (out.dim() != 3 || out.sizes()[0] != 2 || out.sizes()[1] != 8) s.SkipWithError("vmap gave the wrong shape");
}

void batches(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1, 2, 4, 8, 16, 32, 64}) b->Arg(n);
}

}  // namespace

BENCHMARK(vmap_muladd_rule)->Name("vmap/muladd_rule")->Apply(batches);
BENCHMARK(vmap_muladd_boxed_rule)->Name("vmap/muladd_boxed_rule")->Apply(batches);
BENCHMARK(vmap_muladd_plain)->Name("vmap/muladd_plain")->Apply(batches);
BENCHMARK(vmap_muladd_fallback)->Name("vmap/muladd_fallback")->Apply(batches);
BENCHMARK(vmap_nested_2x8)->Name("vmap/nested_2x8");

}  // namespace strata::bench
