// The peer benchmark: PyTorch's own C++ dispatcher (Debian's libtorch) on the
// scenarios of dispatch_bench.cc and registry_bench.cc that PyTorch can express,
// under the same names with a "libtorch/" prefix, so `strata bench --peer libtorch`
// can pair them and print Strata/PyTorch per scenario. The ops and kernels are the
// ones of ../shared/anchors/libtorch_dispatch: kernels that return an input, so
// what is measured is the dispatcher. Not built without libtorch
// (STRATA_BENCH_LIBTORCH); mode stacks, toggles and bundles have no C++ analogue
// in PyTorch and are Strata-only.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <benchmark/benchmark.h>

#include "bench_context.h"

#include <memory>
#include <string>
#include <vector>

namespace {

const bool kCpuContext = strata::bench::addCpuContext();

at::Tensor ident_cpu(const at::Tensor& x) { return x; }
at::Tensor muladd_cpu(const at::Tensor& a, const at::Tensor&, double) { return a; }

TORCH_LIBRARY(strata_peer, m) {
  m.def("ident(Tensor x) -> Tensor");
  m.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
}
TORCH_LIBRARY_IMPL(strata_peer, CPU, m) {
  m.impl("ident", &ident_cpu);
  m.impl("muladd", &muladd_cpu);
}

using IdentSig = at::Tensor(const at::Tensor&);
using MulAddSig = at::Tensor(const at::Tensor&, const at::Tensor&, double);

const c10::TypedOperatorHandle<IdentSig>& identOp() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("strata_peer::ident", "").typed<IdentSig>();
  return op;
}
const c10::TypedOperatorHandle<MulAddSig>& muladdOp() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("strata_peer::muladd", "").typed<MulAddSig>();
  return op;
}

void direct_call(benchmark::State& s) {
  const at::Tensor x = at::ones({4});
  auto* volatile fn = &ident_cpu;
  for (auto _ : s) benchmark::DoNotOptimize(fn(x));
}
BENCHMARK(direct_call)->Name("libtorch/direct_call");

// InferenceMode takes the autograd keys off new tensors: {CPU} alone, as Strata's
// tensors that do not require grad.
void unboxed_ident(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor x = at::ones({4});
  const auto& op = identOp();
  for (auto _ : s) benchmark::DoNotOptimize(op.call(x));
}
BENCHMARK(unboxed_ident)->Name("libtorch/unboxed/ident");

// A normal tensor carries AutogradCPU; the op has no autograd kernel, so the key
// falls through (PyTorch registers an autograd fallthrough for custom ops).
void unboxed_ident_grad(benchmark::State& s) {
  const at::Tensor x = at::ones({4});
  const auto& op = identOp();
  for (auto _ : s) benchmark::DoNotOptimize(op.call(x));
}
BENCHMARK(unboxed_ident_grad)->Name("libtorch/unboxed/ident_grad_fallthrough");

void unboxed_muladd(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4}), b = at::ones({4});
  const auto& op = muladdOp();
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd)->Name("libtorch/unboxed/muladd");

void boxed_muladd(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4}), b = at::ones({4});
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("strata_peer::muladd", "");
  for (auto _ : s) {
    torch::jit::Stack st{a, b, 2.0};
    op.callBoxed(&st);
    benchmark::DoNotOptimize(st);
  }
}
BENCHMARK(boxed_muladd)->Name("libtorch/boxed/muladd");

void unboxed_muladd_autocast(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4}), b = at::ones({4});
  const auto& op = muladdOp();
  at::autocast::set_cpu_enabled(true);  // AutocastCPU included; the op has no rule
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
  at::autocast::set_cpu_enabled(false);
}
BENCHMARK(unboxed_muladd_autocast)->Name("libtorch/unboxed/muladd_autocast_on_no_rule");

// One boxed fallback layer that redispatches below itself: the C++ analogue of one
// dispatch-mode layer (PyTorch's Python key is a boxed fallback of this shape).
void passthroughFallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::TESTING_ONLY_GenericMode),
                     stack);
}
TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&passthroughFallback>());
}
void unboxed_muladd_one_boxed_layer(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4}), b = at::ones({4});
  const auto& op = muladdOp();
  c10::impl::IncludeDispatchKeyGuard layer(c10::DispatchKey::TESTING_ONLY_GenericMode);
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
}
BENCHMARK(unboxed_muladd_one_boxed_layer)->Name("libtorch/unboxed/muladd_one_boxed_layer");

// Each thread its own tensors, as threads serving different requests have.
void threads_unboxed_muladd(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4}), b = at::ones({4});
  const auto& op = muladdOp();
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
  s.SetItemsProcessed(s.iterations());
}
BENCHMARK(threads_unboxed_muladd)->Name("libtorch/threads/unboxed_muladd")->Threads(1)->Threads(2)->UseRealTime();

// --- Autocast, as ../shared/anchors/libtorch_dispatch measures it. ---

// strata_peer::muladd_ac with what torch.library.register_autocast(op, "cpu",
// torch.bfloat16) installs: leave the AutocastCPU layer, cast floating non-float64 CPU
// tensors to bf16, call the op again.
TORCH_LIBRARY_FRAGMENT(strata_peer, m) { m.def("muladd_ac(Tensor a, Tensor b, float c) -> Tensor"); }
TORCH_LIBRARY_IMPL(strata_peer, CPU, m) { m.impl("muladd_ac", &muladd_cpu); }
const c10::TypedOperatorHandle<MulAddSig>& muladdAcOp() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("strata_peer::muladd_ac", "").typed<MulAddSig>();
  return op;
}
at::Tensor muladd_ac_autocast(const at::Tensor& a, const at::Tensor& b, double c) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  auto cast = [](const at::Tensor& t) { return at::autocast::cached_cast(at::kBFloat16, t, c10::DeviceType::CPU); };
  return muladdAcOp().call(cast(a), cast(b), c);
}
TORCH_LIBRARY_IMPL(strata_peer, AutocastCPU, m) { m.impl("muladd_ac", &muladd_ac_autocast); }

struct CpuAutocastOn {  // CPU autocast to bf16 for one scope
  CpuAutocastOn() {
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
  }
  ~CpuAutocastOn() { at::autocast::set_cpu_enabled(false); }
};

void autocast_muladd_with_rule(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4}), b = at::ones({4});
  CpuAutocastOn on;
  at::Tensor out;
  for (auto _ : s) benchmark::DoNotOptimize(out = muladdAcOp().call(a, b, 2.0));
  if (out.scalar_type() != at::kBFloat16) s.SkipWithError("the autocast rule did not cast");
}
BENCHMARK(autocast_muladd_with_rule)->Name("libtorch/autocast/muladd_with_rule");

// at::mm's builtin lower_precision_fp rule: both inputs cast, a bf16 mm.
void autocast_matmul_4x4(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4, 4}), b = at::ones({4, 4});
  CpuAutocastOn on;
  at::Tensor out;
  for (auto _ : s) benchmark::DoNotOptimize(out = at::mm(a, b));
  if (out.scalar_type() != at::kBFloat16) s.SkipWithError("autocast did not cast");
}
BENCHMARK(autocast_matmul_4x4)->Name("libtorch/autocast/matmul_4x4");

void matmul_4x4(benchmark::State& s) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({4, 4}), b = at::ones({4, 4});
  for (auto _ : s) benchmark::DoNotOptimize(at::mm(a, b));
}
BENCHMARK(matmul_4x4)->Name("libtorch/core/matmul_4x4");

void castInto(benchmark::State& s, at::ScalarType from, at::ScalarType to) {
  c10::InferenceMode guard;
  constexpr int64_t n = 1 << 20;
  const at::Tensor src = at::ones({n}, from);
  at::Tensor dst = at::empty({n}, to);
  for (auto _ : s) {
    dst.copy_(src);
    benchmark::ClobberMemory();
  }
  s.SetBytesProcessed(s.iterations() * n * static_cast<int64_t>(src.element_size() + dst.element_size()));
}
BENCHMARK_CAPTURE(castInto, copy_f32, at::kFloat, at::kFloat)->Name("libtorch/cast/copy_f32_1m");
BENCHMARK_CAPTURE(castInto, f32_bf16, at::kFloat, at::kBFloat16)->Name("libtorch/cast/f32_to_bf16_1m");
BENCHMARK_CAPTURE(castInto, f32_f16, at::kFloat, at::kHalf)->Name("libtorch/cast/f32_to_f16_1m");
BENCHMARK_CAPTURE(castInto, bf16_f32, at::kBFloat16, at::kFloat)->Name("libtorch/cast/bf16_to_f32_1m");
BENCHMARK_CAPTURE(castInto, f16_f32, at::kHalf, at::kFloat)->Name("libtorch/cast/f16_to_f32_1m");

// 10,000 kernels registered on 10,000 defined operators, then deregistered (the
// IMPL library dies): what loading and unloading a large kernel library costs.
constexpr int kRegistryOps = 10000;
void defineRegistryOps() {
  static auto* lib = [] {
    auto* l = new torch::Library(torch::Library::DEF, "strata_peer_reg", c10::nullopt, __FILE__, __LINE__);
    for (int i = 0; i < kRegistryOps; ++i) l->def(("op" + std::to_string(i) + "(Tensor x) -> Tensor").c_str());
    return l;
  }();
  (void)lib;
}
void registry_register_10k(benchmark::State& s) {
  defineRegistryOps();
  std::vector<std::string> names;
  for (int i = 0; i < kRegistryOps; ++i) names.push_back("op" + std::to_string(i));
  for (auto _ : s) {
    torch::Library lib(torch::Library::IMPL, "strata_peer_reg", c10::DispatchKey::CPU, __FILE__, __LINE__);
    for (const auto& n : names) lib.impl(n.c_str(), &ident_cpu);
  }
  s.SetItemsProcessed(s.iterations() * kRegistryOps);
}
BENCHMARK(registry_register_10k)->Name("libtorch/registry/register_10k")->Unit(benchmark::kMillisecond);

void registry_find_op(benchmark::State& s) {
  muladdOp();
  const c10::OperatorName name{"strata_peer::muladd", ""};
  for (auto _ : s) benchmark::DoNotOptimize(c10::Dispatcher::singleton().findSchema(name));
}
BENCHMARK(registry_find_op)->Name("libtorch/registry/find_op");

}  // namespace

BENCHMARK_MAIN();

// ---- Autograd (autograd_bench.cc's pair): anchor BM_Autograd_Muladd_ForwardBackward.
// strata_peer::muladd_ag computes a*b+c; its Autograd kernel is a
// torch::autograd::Function; one step is y = muladd_ag(a, b, 2), y.sum().backward().
#include <torch/csrc/autograd/custom_function.h>

namespace {
at::Tensor muladd_ag_cpu(const at::Tensor& a, const at::Tensor& b, double c) { return a * b + c; }
TORCH_LIBRARY_FRAGMENT(strata_peer, m) { m.def("muladd_ag(Tensor a, Tensor b, float c) -> Tensor"); }
TORCH_LIBRARY_IMPL(strata_peer, CPU, m) { m.impl("muladd_ag", &muladd_ag_cpu); }
const auto& muladdAgOp() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("strata_peer::muladd_ag", "").typed<MulAddSig>();
  return op;
}
struct MulAddFn : torch::autograd::Function<MulAddFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, double c) {
    ctx->save_for_backward({a, b});
    at::AutoDispatchBelowADInplaceOrView below;
    return muladdAgOp().call(a, b, c);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    auto ab = ctx->get_saved_variables();
    return {g[0] * ab[1], g[0] * ab[0], at::Tensor()};
  }
};
at::Tensor muladd_ag_autograd(const at::Tensor& a, const at::Tensor& b, double c) { return MulAddFn::apply(a, b, c); }
TORCH_LIBRARY_IMPL(strata_peer, Autograd, m) { m.impl("muladd_ag", &muladd_ag_autograd); }

void autograd_muladd_forward_backward(benchmark::State& s) {
  at::Tensor a = at::ones({4}).set_requires_grad(true), b = at::ones({4}).set_requires_grad(true);
  for (auto _ : s) muladdAgOp().call(a, b, 2.0).sum().backward();
}
BENCHMARK(autograd_muladd_forward_backward)->Name("libtorch/autograd/muladd_forward_backward");
}  // namespace
