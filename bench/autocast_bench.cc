// The autocast layer: a custom op with a register_autocast rule (two real bfloat16
// casts, then the kernel), core::matmul 4x4 under its builtin lower_precision_fp rule,
// and the casts' throughput on 1M elements beside a plain copy. Paired with
// libtorch_bench.cc's "libtorch/autocast/..." and "libtorch/cast/..." runs.
#include <benchmark/benchmark.h>

#include "bench_ops.h"
#include "strata/modes/autocast.h"

namespace strata::bench {
namespace {

Tensor muladd_ac_cpu(const Tensor& a, const Tensor&, double) { return a; }

// bench::muladd_ac: bench::muladd plus what register_autocast(op, "cpu", bfloat16)
// installs, as ../shared/anchors/libtorch_dispatch's anchor::muladd_ac.
const TypedOperatorHandle<MulAddSig>& muladdAcOp() {
  static const auto op = [] {
    auto* lib = new Library(Library::DEF, "bench_ac");  // leaked: outlives static destruction
    lib->def("muladd_ac(Tensor a, Tensor b, float c) -> Tensor");
    lib->impl("muladd_ac", &muladd_ac_cpu, DispatchKey::CPU);
    modes::register_autocast("bench_ac::muladd_ac", "cpu", ScalarType::BFloat16, *lib);
    return Dispatcher::singleton().findSchemaOrThrow("bench_ac::muladd_ac", "").typed<MulAddSig>();
  }();
  return op;
}

void autocast_muladd_with_rule(benchmark::State& s) {
  const auto& op = muladdAcOp();
  const Tensor a = ones({4}), b = ones({4});
  modes::AutocastGuard on(DeviceType::CPU, ScalarType::BFloat16);
  Tensor out;
  for (auto _ : s) benchmark::DoNotOptimize(out = op.call(a, b, 2.0));
  if (out.dtype() != ScalarType::BFloat16) s.SkipWithError("the autocast rule did not cast");
}
BENCHMARK(autocast_muladd_with_rule)->Name("autocast/muladd_with_rule");

void autocast_matmul_4x4(benchmark::State& s) {
  const Tensor a = ones({4, 4}), b = ones({4, 4});
  modes::AutocastGuard on(DeviceType::CPU, ScalarType::BFloat16);
  Tensor out;
  for (auto _ : s) benchmark::DoNotOptimize(out = ops::matmul(a, b));
  if (out.dtype() != ScalarType::BFloat16) s.SkipWithError("autocast did not cast");
}
BENCHMARK(autocast_matmul_4x4)->Name("autocast/matmul_4x4");

// The same matmul with autocast off: what the rule and its casts add.
void matmul_4x4(benchmark::State& s) {
  const Tensor a = ones({4, 4}), b = ones({4, 4});
  for (auto _ : s) benchmark::DoNotOptimize(ops::matmul(a, b));
}
BENCHMARK(matmul_4x4)->Name("core/matmul_4x4");

// 1M elements from src's dtype into a preallocated dst: bytes read plus written per
// second, so a cast's distance from a plain copy (memory bandwidth) shows.
void castInto(benchmark::State& s, ScalarType from, ScalarType to) {
  constexpr int64_t n = 1 << 20;
  const Tensor src = ones({n}, from), dst = empty({n}, to);
  for (auto _ : s) {
    dst.copy_(src);
    benchmark::ClobberMemory();
  }
  s.SetBytesProcessed(s.iterations() * n * static_cast<int64_t>(elementSize(from) + elementSize(to)));
}
BENCHMARK_CAPTURE(castInto, copy_f32, ScalarType::Float, ScalarType::Float)->Name("cast/copy_f32_1m");
BENCHMARK_CAPTURE(castInto, f32_bf16, ScalarType::Float, ScalarType::BFloat16)->Name("cast/f32_to_bf16_1m");
BENCHMARK_CAPTURE(castInto, f32_f16, ScalarType::Float, ScalarType::Half)->Name("cast/f32_to_f16_1m");
BENCHMARK_CAPTURE(castInto, bf16_f32, ScalarType::BFloat16, ScalarType::Float)->Name("cast/bf16_to_f32_1m");
BENCHMARK_CAPTURE(castInto, f16_f32, ScalarType::Half, ScalarType::Float)->Name("cast/f16_to_f32_1m");

}  // namespace
}  // namespace strata::bench
