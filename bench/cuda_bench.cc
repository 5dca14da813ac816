// CUDA: what dispatch adds to a kernel launch, and an elementwise op end to end.
// Each scenario is skipped (reported as an error naming the reason) without a
// device. Built with the CUDA backend only.
//
//   cuda/direct_launch_4        the launch itself, no dispatcher (the floor)
//   cuda/unboxed/muladd_launch_4  bench::muladd's CUDA kernel through the
//                               dispatcher: dispatch + launch into a preallocated out
//   cuda/core_add_1m            core::add on two 1M-float tensors: dispatch,
//                               allocation, launch, and a device synchronize
#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

#include <string>

#include "bench_ops.h"

cudaError_t strataBenchMulAdd(const float* a, const float* b, float c, float* out, int64_t n);

namespace strata::bench {
namespace {

const Device kGpu(DeviceType::CUDA, 0);
const TensorOptions kGpuFloat = TensorOptions(kFloat32).with_device(kGpu);

bool skipWithoutDevice(benchmark::State& s) {
  if (cuda::is_available()) return false;
  s.SkipWithError(("no CUDA device: " + cuda::unavailable_reason()).c_str());
  return true;
}

bool synchronize(benchmark::State& s) {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return true;
  s.SkipWithError((std::string("CUDA: ") + cudaGetErrorString(e)).c_str());
  return false;
}

void direct_launch(benchmark::State& s) {
  if (skipWithoutDevice(s)) return;
  const Tensor a = ones({4}, kGpuFloat), b = ones({4}, kGpuFloat);
  Tensor out = empty({4}, kGpuFloat);
  for (auto _ : s) {
    if (strataBenchMulAdd(a.data_ptr<float>(), b.data_ptr<float>(), 2.0f, out.data_ptr<float>(), 4) != cudaSuccess) {
      s.SkipWithError("the launch failed");
      break;
    }
  }
  synchronize(s);
}
BENCHMARK(direct_launch)->Name("cuda/direct_launch_4");

// A CUDA kernel for bench::muladd that writes into an output it owns, so the
// scenario measures dispatch and launch, not allocation.
struct MulAddInto {
  Tensor out;
  Tensor operator()(const Tensor& a, const Tensor& b, double c) const {
    const cudaError_t e = strataBenchMulAdd(a.data_ptr<float>(), b.data_ptr<float>(), static_cast<float>(c),
                                            out.data_ptr<float>(), out.numel());
    STRATA_CHECK(e == cudaSuccess, Device, "bench::muladd: ", cudaGetErrorString(e));
    return out;
  }
};

void unboxed_muladd_launch(benchmark::State& s) {
  if (skipWithoutDevice(s)) return;
  const auto& op = muladdOp();
  Library cuda_kernels(Library::IMPL, "bench", DispatchKey::CUDA);
  cuda_kernels.impl("muladd", MulAddInto{empty({4}, kGpuFloat)});
  const Tensor a = ones({4}, kGpuFloat), b = ones({4}, kGpuFloat);
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
  if (!synchronize(s)) return;
  if (!ops::allclose(op.call(a, b, 2.0).to(kCPU), full({4}, 3.0))) s.SkipWithError("wrong result");
}
BENCHMARK(unboxed_muladd_launch)->Name("cuda/unboxed/muladd_launch_4");

void core_add_1m(benchmark::State& s) {
  if (skipWithoutDevice(s)) return;
  constexpr int64_t n = 1 << 20;
  const Tensor a = arange(n, TensorOptions(kFloat32)).to(kGpu), b = ones({n}, kGpuFloat);
  for (auto _ : s) {
    benchmark::DoNotOptimize(ops::add(a, b));
    if (!synchronize(s)) return;
  }
  s.SetBytesProcessed(s.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
  if (!ops::allclose(ops::add(a, b).to(kCPU), arange(1, n + 1, 1, TensorOptions(kFloat32)))) s.SkipWithError("wrong result");
}
BENCHMARK(core_add_1m)->Name("cuda/core_add_1m")->UseRealTime();

}  // namespace
}  // namespace strata::bench
