// Fake tensors and custom_op. fake/*: one call under FakeTensorMode on fake 4-element
// tensors (a [4, 4] pair for matmul): a custom op with a fake impl (register_fake, as
// muladd ships), core::add.Tensor and core::matmul through their Meta kernels. Paired
// with PyTorch's Python FakeTensorMode (../shared/anchors/python_layers:
// python_fake_mode_muladd_ns, python_fake_mode_aten_add_ns) by `strata bench
// --python-anchors FILE`. custom_op/*: the same trivial kernel called as a custom_op
// and as an op made with Library: custom_op adds only the check that the output
// aliases no input (Note [A custom op's outputs are new tensors]).
#include <benchmark/benchmark.h>

#include "bench_ops.h"
#include "strata/modes/custom_op.h"
#include "strata/modes/fake.h"

namespace strata::bench {
namespace {

using Sig = Tensor(const Tensor&, const Tensor&, double);

Tensor passThrough(const Tensor& a, const Tensor&, double) { return a; }
// A custom op may not return an input (Note [A custom op's outputs are new tensors]):
// the custom_op pair returns one tensor made once, so both pay the same for the kernel.
Tensor madeOnce(const Tensor&, const Tensor&, double) {
  static const Tensor out = ones({4});
  return out;
}

const TypedOperatorHandle<Sig>& fakeMulAdd() {
  static const TypedOperatorHandle<Sig> op = [] {
    auto* lib = new Library(Library::DEF, "bench_fake");  // leaked, as every bench op
    lib->def("muladd(Tensor a, Tensor b, float c) -> Tensor");
    lib->impl("muladd", &passThrough, DispatchKey::CPU);
    modes::register_fake("bench_fake::muladd", [](const Tensor& a, const Tensor&, double) { return ops::empty_like(a); },
                         *lib);
    return Dispatcher::singleton().findSchemaOrThrow("bench_fake::muladd").typed<Sig>();
  }();
  return op;
}

template <typename F>
void underFakeMode(benchmark::State& s, std::vector<int64_t> shape, F call) {
  auto mode = std::make_shared<modes::FakeTensorMode>();
  const Tensor a = mode->from_tensor(ones(shape)), b = mode->from_tensor(ones(shape));
  modes::ModeGuard guard(mode);
  Tensor out;
  for (auto _ : s) benchmark::DoNotOptimize(out = call(a, b));
  if (!modes::is_fake(out)) s.SkipWithError("the result is not a fake tensor");
}

void fake_muladd(benchmark::State& s) {
  const auto& op = fakeMulAdd();
  underFakeMode(s, {4}, [&](const Tensor& a, const Tensor& b) { return op.call(a, b, 2.0); });
}
void fake_core_add(benchmark::State& s) {
  underFakeMode(s, {4}, [](const Tensor& a, const Tensor& b) { return ops::add(a, b); });
}
void fake_core_matmul(benchmark::State& s) {
  underFakeMode(s, {4, 4}, [](const Tensor& a, const Tensor& b) { return ops::matmul(a, b); });
}

// custom_op against Library: one kernel, one call path.
void custom_op_call_muladd(benchmark::State& s) {
  static const auto* op = new auto(modes::custom_op("bench_cop::muladd", &madeOnce, {"a", "b", "c"}, {}, {"cpu"}));
  const Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize((*op)(a, b, 2.0));
}
void custom_op_library_muladd(benchmark::State& s) {
  static const TypedOperatorHandle<Sig> op = [] {
    auto* lib = new Library(Library::DEF, "bench_lib");
    lib->def("muladd(Tensor a, Tensor b, float c) -> Tensor");
    lib->impl("muladd", &madeOnce, DispatchKey::CPU);
    return Dispatcher::singleton().findSchemaOrThrow("bench_lib::muladd").typed<Sig>();
  }();
  const Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}

}  // namespace

BENCHMARK(fake_muladd)->Name("fake/muladd");
BENCHMARK(fake_core_add)->Name("fake/core_add");
BENCHMARK(fake_core_matmul)->Name("fake/core_matmul");
BENCHMARK(custom_op_call_muladd)->Name("custom_op/call_muladd");
BENCHMARK(custom_op_library_muladd)->Name("custom_op/library_muladd");

}  // namespace strata::bench
