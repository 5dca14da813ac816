// The registry's cold paths: registering and deregistering kernels, toggling one,
// finding an operator by name. Calls never take these paths; hosts that load and
// unload bundles, and admins who toggle kernels, do.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench_ops.h"

namespace strata::bench {
namespace {

// 10,000 kernels registered on 10,000 defined operators, then deregistered (the
// IMPL library dies): what loading and unloading a large kernel library costs. The
// operators are defined once, outside the timing.
constexpr int kRegistryOps = 10000;

const std::vector<std::string>& registryOps() {
  static const std::vector<std::string>* names = [] {
    auto* lib = new Library(Library::DEF, "bench_reg");  // leaked: the ops stay defined
    auto* out = new std::vector<std::string>();
    for (int i = 0; i < kRegistryOps; ++i) {
      out->push_back("op" + std::to_string(i));
      lib->def(out->back() + "(Tensor x) -> Tensor");
    }
    return out;
  }();
  return *names;
}

void registry_register_10k(benchmark::State& s) {
  const auto& names = registryOps();
  for (auto _ : s) {
    {
      Library lib(Library::IMPL, "bench_reg", DispatchKey::CPU);
      for (const auto& n : names) lib.impl(n, &ident_cpu);
    }
    // Freeing the deregistered kernels is part of deregistering them; no call is in
    // flight here (Note [Publishing dispatch table slots]).
    Dispatcher::singleton().reclaimRetiredKernels();
  }
  s.SetItemsProcessed(s.iterations() * kRegistryOps);
}
BENCHMARK(registry_register_10k)->Name("registry/register_10k")->Unit(benchmark::kMillisecond);

// set_kernel_enabled off and on again: two table recomputations of one op.
void registry_toggle(benchmark::State& s) {
  muladdOp();
  for (auto _ : s) {
    set_kernel_enabled("bench::muladd", "cpu", false);
    set_kernel_enabled("bench::muladd", "cpu", true);
  }
  if (!is_kernel_enabled("bench::muladd", "cpu")) s.SkipWithError("the kernel was left disabled");
}
BENCHMARK(registry_toggle)->Name("registry/toggle");

void registry_find_op(benchmark::State& s) {
  muladdOp();
  const OperatorName name{"bench::muladd", ""};
  for (auto _ : s) benchmark::DoNotOptimize(Dispatcher::singleton().findSchema(name));
}
BENCHMARK(registry_find_op)->Name("registry/find_op");

}  // namespace
}  // namespace strata::bench
