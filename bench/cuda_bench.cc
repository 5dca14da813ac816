// CUDA: what dispatch adds to a kernel launch, an elementwise op end to end, and
// the kernels' bandwidth. Each scenario is skipped (reported as an error, "no CUDA
// device: <reason>") without a device: no figure is ever made up. Built with the
// CUDA backend only. Work runs on Strata's current stream (the default stream here).
//
//   cuda/direct_launch_4          the launch itself, no dispatcher (the floor)
//   cuda/unboxed/muladd_launch_4  bench::muladd's CUDA kernel through the
//                                 dispatcher: dispatch + launch into a preallocated out
//   cuda/core_add_1m              core::add on two 1M-float tensors: dispatch,
//                                 allocation (from the caching allocator), launch, and
//                                 a synchronize of the stream; counter
//                                 cuda_mallocs_per_iter (the allocator's cudaMalloc
//                                 calls per iteration: 0 in steady state)
//   cuda/bw/<kernel>/<1m|16m|256m>  GPU time between two events around one call, and
//                                 bytes read + written per second (GB/s):
//       memcpy_d2d    cudaMemcpyAsync device to device of 6 bytes per element (it
//                     reads and writes the 12 bytes per element muladd moves): the
//                     device's copy bandwidth, the ceiling
//       muladd        extension_cpp::mymuladd's CUDA kernel (plugins/muladd) through
//                     the dispatcher, output from the allocator: a*b+c, float32
//       core_add      core::add, float32
//       cast_f32_f16  core::to.dtype float32 -> float16
#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

#include <string>

#include "bench_ops.h"

cudaError_t strataBenchMulAdd(const float* a, const float* b, float c, float* out, int64_t n, cudaStream_t stream);
// plugins/muladd/muladd_cuda.cu: the muladd bundle's kernel.
extern "C" const char* extension_cpp_muladd_launch(const float* a, const float* b, float c, float* out, int64_t n,
                                                   void* stream, int device);

namespace strata::bench {
namespace {

const Device kGpu(DeviceType::CUDA, 0);
const TensorOptions kGpuFloat = TensorOptions(kFloat32).with_device(kGpu);

bool skipWithoutDevice(benchmark::State& s) {
  if (cuda::is_available()) return false;
  s.SkipWithError(("no CUDA device: " + cuda::unavailable_reason()).c_str());
  return true;
}

cudaStream_t currentStream() { return static_cast<cudaStream_t>(cuda::getCurrentStream(0).handle()); }

bool synchronize(benchmark::State& s) {
  const cudaError_t e = cudaStreamSynchronize(currentStream());
  if (e == cudaSuccess) return true;
  s.SkipWithError((std::string("CUDA: ") + cudaGetErrorString(e)).c_str());
  return false;
}

void direct_launch(benchmark::State& s) {
  if (skipWithoutDevice(s)) return;
  const Tensor a = ones({4}, kGpuFloat), b = ones({4}, kGpuFloat);
  Tensor out = empty({4}, kGpuFloat);
  const cudaStream_t stream = currentStream();
  for (auto _ : s) {
    if (strataBenchMulAdd(a.data_ptr<float>(), b.data_ptr<float>(), 2.0f, out.data_ptr<float>(), 4, stream) !=
        cudaSuccess) {
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
                                            out.data_ptr<float>(), out.numel(), currentStream());
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
  ops::add(a, b);  // the result's block is cached from here on
  const uint64_t mallocs = cuda::memory_stats(0).device_mallocs;
  for (auto _ : s) {
    benchmark::DoNotOptimize(ops::add(a, b));
    if (!synchronize(s)) return;
  }
  s.counters["cuda_mallocs_per_iter"] = benchmark::Counter(
      static_cast<double>(cuda::memory_stats(0).device_mallocs - mallocs), benchmark::Counter::kAvgIterations);
  s.SetBytesProcessed(s.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
  if (!ops::allclose(ops::add(a, b).to(kCPU), arange(1, n + 1, 1, TensorOptions(kFloat32)))) s.SkipWithError("wrong result");
}
BENCHMARK(core_add_1m)->Name("cuda/core_add_1m")->UseRealTime();

// Times fn() on the GPU between two events on the current stream, per iteration,
// and counts bytes_per_call read and written.
template <typename F>
void timeOnGpu(benchmark::State& s, int64_t bytes_per_call, F fn) {
  const cudaStream_t stream = currentStream();
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    s.SkipWithError("cudaEventCreate failed");
    return;
  }
  fn();  // warm: kernels loaded, the allocator's blocks cached
  for (auto _ : s) {
    cudaEventRecord(start, stream);
    fn();
    cudaEventRecord(stop, stream);
    const cudaError_t e = cudaEventSynchronize(stop);
    if (e != cudaSuccess) {
      s.SkipWithError((std::string("CUDA: ") + cudaGetErrorString(e)).c_str());
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    s.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  s.SetBytesProcessed(s.iterations() * bytes_per_call);
}

// A CUDA kernel for bench::muladd: the muladd bundle's, into a new output.
Tensor muladdBundleKernel(const Tensor& a, const Tensor& b, double c) {
  Tensor out = empty(a.sizes(), kGpuFloat);
  const cuda::Stream st = cuda::getCurrentStream(0);
  const char* error = extension_cpp_muladd_launch(a.data_ptr<float>(), b.data_ptr<float>(), static_cast<float>(c),
                                                  out.data_ptr<float>(), out.numel(), st.handle(), st.device_index());
  STRATA_CHECK(error == nullptr, Device, "bench::muladd: ", error);
  return out;
}

void bw_memcpy(benchmark::State& s, int64_t n) {
  if (skipWithoutDevice(s)) return;
  const int64_t bytes = 6 * n;  // read + written: 12 bytes per element, as muladd
  const Tensor src = empty({bytes}, TensorOptions(ScalarType::Byte).with_device(kGpu));
  const Tensor dst = empty({bytes}, TensorOptions(ScalarType::Byte).with_device(kGpu));
  const cudaStream_t stream = currentStream();
  timeOnGpu(s, 2 * bytes, [&] {
    cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream);
  });
}

void bw_muladd(benchmark::State& s, int64_t n) {
  if (skipWithoutDevice(s)) return;
  const auto& op = muladdOp();
  Library cuda_kernels(Library::IMPL, "bench", DispatchKey::CUDA);
  cuda_kernels.impl("muladd", &muladdBundleKernel);
  const Tensor a = ones({n}, kGpuFloat), b = full({n}, 2.0, kGpuFloat);
  timeOnGpu(s, 12 * n, [&] { benchmark::DoNotOptimize(op.call(a, b, 1.0)); });
  if (!synchronize(s)) return;
  if (op.call(a, b, 1.0).slice(0, n - 4, n).to(kCPU).to_vector<float>() != std::vector<float>(4, 3.0f)) {
    s.SkipWithError("wrong result");
  }
}

void bw_core_add(benchmark::State& s, int64_t n) {
  if (skipWithoutDevice(s)) return;
  const Tensor a = ones({n}, kGpuFloat), b = ones({n}, kGpuFloat);
  timeOnGpu(s, 12 * n, [&] { benchmark::DoNotOptimize(ops::add(a, b)); });
}

void bw_cast(benchmark::State& s, int64_t n) {
  if (skipWithoutDevice(s)) return;
  const Tensor a = ones({n}, kGpuFloat);
  timeOnGpu(s, 6 * n, [&] { benchmark::DoNotOptimize(ops::to(a, kFloat16)); });
}

// The device, in the JSON's context ("cuda_device"): strata bench quotes it beside
// the CUDA goals.
std::string deviceDescription() {
  if (!cuda::is_available()) return "none (" + cuda::unavailable_reason() + ")";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "cuda:0 (properties unavailable)";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return std::string(p.name) + " (cuda:0, sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + std::to_string(p.totalGlobalMem >> 30) +
         " GiB; driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ", runtime " +
         std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ")";
}

const bool kRegistered = [] {
  benchmark::AddCustomContext("cuda_device", deviceDescription());
  const std::pair<const char*, int64_t> sizes[] = {{"1m", int64_t{1} << 20}, {"16m", int64_t{16} << 20},
                                                   {"256m", int64_t{256} << 20}};
  const std::pair<const char*, void (*)(benchmark::State&, int64_t)> kernels[] = {
      {"memcpy_d2d", &bw_memcpy}, {"muladd", &bw_muladd}, {"core_add", &bw_core_add}, {"cast_f32_f16", &bw_cast}};
  for (const auto& [kernel, fn] : kernels) {
    for (const auto& [label, n] : sizes) {
      benchmark::RegisterBenchmark((std::string("cuda/bw/") + kernel + "/" + label).c_str(), fn, n)->UseManualTime();
    }
  }
  return true;
}();

}  // namespace
}  // namespace strata::bench
