// Costs of the SDK's values: what every dispatch layer above pays to build,
// box and describe its arguments. Run: build/bin/strata_bench
#include <benchmark/benchmark.h>

#include "bench_context.h"
#include "strata/strata.h"

namespace strata {
namespace {

const bool kCpuContext = bench::addCpuContext();

constexpr const char* kAddOut =
    "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)";

void BM_SchemaParse(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(parseSchema(kAddOut));
}
BENCHMARK(BM_SchemaParse)->Name("schema/parse_add_out");

void BM_SchemaPrint(benchmark::State& state) {
  const FunctionSchema s = parseSchema(kAddOut);
  for (auto _ : state) benchmark::DoNotOptimize(s.str());
}
BENCHMARK(BM_SchemaPrint)->Name("schema/print_add_out");

void BM_EmptyCpu(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(empty({2, 3}));
}
BENCHMARK(BM_EmptyCpu)->Name("tensor/empty_cpu_2x3");

void BM_EmptyMeta(benchmark::State& state) {
  const TensorOptions meta(kMeta);
  for (auto _ : state) benchmark::DoNotOptimize(empty({1024, 1024}, meta));
}
BENCHMARK(BM_EmptyMeta)->Name("tensor/empty_meta_1024x1024");

void BM_View(benchmark::State& state) {
  const Tensor t = zeros({4, 8});
  for (auto _ : state) benchmark::DoNotOptimize(t.transpose(0, 1));
}
BENCHMARK(BM_View)->Name("tensor/transpose_view");

void BM_CopyStrided(benchmark::State& state) {
  const Tensor src = zeros({64, 64}).transpose(0, 1);
  const Tensor dst = empty({64, 64}, kFloat64);
  for (auto _ : state) dst.copy_(src);
  state.SetItemsProcessed(state.iterations() * src.numel());
}
BENCHMARK(BM_CopyStrided)->Name("tensor/copy_strided_convert_64x64");

void BM_HandleCopy(benchmark::State& state) {
  const Tensor t = zeros({1});
  for (auto _ : state) {
    Tensor c = t;
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_HandleCopy)->Name("tensor/handle_copy");

// The boxed calling convention's unit of work: box muladd's arguments, unbox them.
void BM_StackMuladd(benchmark::State& state) {
  const Tensor a = zeros({3});
  const Tensor b = zeros({3});
  Stack stack;
  stack.reserve(4);
  for (auto _ : state) {
    push(stack, a, b, 2.0);
    benchmark::DoNotOptimize(stack[0].toTensor());
    benchmark::DoNotOptimize(stack[1].toTensor());
    benchmark::DoNotOptimize(stack[2].toDouble());
    stack.clear();
  }
}
BENCHMARK(BM_StackMuladd)->Name("ivalue/stack_box_unbox_muladd");

void BM_DLPackRoundTrip(benchmark::State& state) {
  const Tensor t = zeros({16});
  for (auto _ : state) benchmark::DoNotOptimize(fromDLPack(toDLPack(t)));
}
BENCHMARK(BM_DLPackRoundTrip)->Name("dlpack/roundtrip");

}  // namespace
}  // namespace strata
