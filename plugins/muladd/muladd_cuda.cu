// CUDA kernels of the muladd bundle (float32, contiguous), launched on the default
// stream like the SDK's own CUDA kernels, so a copy back to the host (a cudaMemcpy)
// waits for them. The C++ side checks devices, shapes and dtypes; each launcher
// returns null, or the CUDA runtime's reason when the launch failed.
#include <cuda_runtime.h>

#include <cstdint>

namespace {
__global__ void muladd_kernel(const float* a, const float* b, float c, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i] + c;
}
__global__ void mul_kernel(const float* a, const float* b, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i];
}
__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
constexpr int kThreads = 256;
unsigned blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
const char* launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}
}  // namespace

extern "C" const char* extension_cpp_muladd_launch(const float* a, const float* b, float c, float* out, int64_t n) {
  if (n == 0) return nullptr;
  muladd_kernel<<<blocks(n), kThreads>>>(a, b, c, out, n);
  return launched();
}
extern "C" const char* extension_cpp_mul_launch(const float* a, const float* b, float* out, int64_t n) {
  if (n == 0) return nullptr;
  mul_kernel<<<blocks(n), kThreads>>>(a, b, out, n);
  return launched();
}
extern "C" const char* extension_cpp_add_launch(const float* a, const float* b, float* out, int64_t n) {
  if (n == 0) return nullptr;
  add_kernel<<<blocks(n), kThreads>>>(a, b, out, n);
  return launched();
}
