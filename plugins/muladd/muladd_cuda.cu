// CUDA kernels of the muladd bundle (float32, contiguous), launched on the stream
// they are given: the C++ side passes Strata's current stream of the tensors'
// device (strata::cuda::getCurrentStream), so they are ordered with the SDK's own
// work and a copy back to the host waits for them. The C++ side checks devices,
// shapes and dtypes; each launcher returns null, or the CUDA runtime's reason when
// the launch failed.
//
// The kernels are memory-bound: each thread moves 16 bytes (a float4) per load and
// store when the buffers are 16-byte aligned (Strata's allocator gives 512-byte
// aligned blocks), in a grid-stride loop over a grid that fills the device once,
// as the SDK's own elementwise kernels (Note [Elementwise kernels at bandwidth] in
// sdk/src/cuda/elementwise.cu).
#include <atomic>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

template <typename F>
__global__ void vec4_kernel(F f, const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                            int64_t n, bool vectorized) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (vectorized) {
    const int64_t nvec = n / 4;
    const auto* a4 = reinterpret_cast<const float4*>(a);
    const auto* b4 = reinterpret_cast<const float4*>(b);
    auto* o4 = reinterpret_cast<float4*>(out);
    for (int64_t i = tid; i < nvec; i += stride) {
      const float4 x = a4[i], y = b4[i];
      o4[i] = make_float4(f(x.x, y.x), f(x.y, y.y), f(x.z, y.z), f(x.w, y.w));
    }
    done = nvec * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) out[i] = f(a[i], b[i]);
}

struct MulAdd {
  float c;
  __device__ float operator()(float x, float y) const { return x * y + c; }
};
struct Mul {
  __device__ float operator()(float x, float y) const { return x * y; }
};
struct Add {
  __device__ float operator()(float x, float y) const { return x + y; }
};

constexpr int kThreads = 256;

// Enough 256-thread blocks to fill every SM (8 each), no more than the work needs.
// The SM count is cached per device; threads may race to fill it, with atomics.
unsigned grid(int64_t items, int device) {
  static std::atomic<int> sms[64] = {};
  int count = device >= 0 && device < 64 ? sms[device].load(std::memory_order_relaxed) : 0;
  if (count == 0) {
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
      cudaGetLastError();
      count = 16;
    } else if (device >= 0 && device < 64) {
      sms[device].store(count, std::memory_order_relaxed);
    }
  }
  const int64_t wanted = (items + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(count) * 8;
  return static_cast<unsigned>(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename F>
const char* launch(F f, const float* a, const float* b, float* out, int64_t n, void* stream, int device) {
  if (n == 0) return nullptr;
  // The tensors' device is made current for the launch (the stream belongs to it),
  // and the caller's current device is restored.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return cudaGetErrorString(cudaGetLastError());
  if (previous != device && cudaSetDevice(device) != cudaSuccess) return cudaGetErrorString(cudaGetLastError());
  const bool vec = aligned16(a) && aligned16(b) && aligned16(out);
  vec4_kernel<<<grid(vec ? (n + 3) / 4 : n, device), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(f, a, b, out,
                                                                                                       n, vec);
  const cudaError_t e = cudaGetLastError();
  if (previous != device) cudaSetDevice(previous);
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace

extern "C" const char* extension_cpp_muladd_launch(const float* a, const float* b, float c, float* out, int64_t n,
                                                   void* stream, int device) {
  return launch(MulAdd{c}, a, b, out, n, stream, device);
}
extern "C" const char* extension_cpp_mul_launch(const float* a, const float* b, float* out, int64_t n, void* stream,
                                                int device) {
  return launch(Mul{}, a, b, out, n, stream, device);
}
extern "C" const char* extension_cpp_add_launch(const float* a, const float* b, float* out, int64_t n, void* stream,
                                                int device) {
  return launch(Add{}, a, b, out, n, stream, device);
}
