// Autograd. autograd/muladd_forward_backward: one training step through a custom op
// with a register_autograd formula on 4-element leaves, y = muladd(a, b, 2) then
// sum(y).backward() (their .grad accumulates); paired with PyTorch's
// BM_Autograd_Muladd_ForwardBackward (a torch::autograd::Function at the op's Autograd
// key, ../shared/anchors/libtorch_dispatch) as libtorch/autograd/muladd_forward_backward.
// autograd/muladd_forward_no_grad_inputs: the same op, with its formula registered,
// called on plain tensors: the layer must cost nothing (goal: within 2 ns of
// unboxed/muladd).
#include <benchmark/benchmark.h>

#include "bench_ops.h"
#include "strata/modes/autograd.h"

namespace strata::bench {
namespace {

using Sig = Tensor(const Tensor&, const Tensor&, double);

Tensor muladdCpu(const Tensor& a, const Tensor& b, double c) { return ops::add(ops::mul(a, b), c); }

const TypedOperatorHandle<Sig>& agMulAdd() {
  static const TypedOperatorHandle<Sig> op = [] {
    auto* lib = new Library(Library::DEF, "bench_ag");  // leaked, as every bench op
    lib->def("muladd(Tensor a, Tensor b, float c) -> Tensor");
    lib->impl("muladd", &muladdCpu, DispatchKey::CPU);
    modes::register_autograd(
        "bench_ag::muladd",
        [](modes::AutogradContext& ctx, const std::vector<Tensor>& g) -> std::vector<IValue> {
          const auto ab = ctx.saved_tensors();
          return {ops::mul(g[0], ab[1]), ops::mul(g[0], ab[0]), IValue()};
        },
        [](modes::AutogradContext& ctx, const Stack& in, const Stack&) {
          ctx.save_for_backward({in[0].toTensor(), in[1].toTensor()});
        },
        *lib);
    return Dispatcher::singleton().findSchemaOrThrow("bench_ag::muladd").typed<Sig>();
  }();
  return op;
}

void autograd_muladd_forward_backward(benchmark::State& s) {
  const auto& op = agMulAdd();
  const Tensor a = ones({4}), b = ones({4});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  if (op.call(a, b, 2.0).grad_fn_name() != "MuladdBackward") s.SkipWithError("not through the formula");
  for (auto _ : s) ops::sum(op.call(a, b, 2.0)).backward();
}
BENCHMARK(autograd_muladd_forward_backward)->Name("autograd/muladd_forward_backward");

void autograd_muladd_forward_no_grad_inputs(benchmark::State& s) {
  // The bench's muladd (the kernel unboxed/muladd calls) with a formula registered.
  const auto& op = muladdOp();
  static RegistrationHandleRAII formula = modes::register_autograd(
      "bench::muladd", [](modes::AutogradContext&, const std::vector<Tensor>& g) -> std::vector<IValue> {
        return {g[0], g[0], IValue()};
      });
  const Tensor a = ones({4}), b = ones({4});
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(autograd_muladd_forward_no_grad_inputs)->Name("autograd/muladd_forward_no_grad_inputs");

}  // namespace
}  // namespace strata::bench
