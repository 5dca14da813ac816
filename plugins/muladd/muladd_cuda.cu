// CUDA kernels of the muladd bundle (float32, contiguous). Launched on the
// default stream; the C++ side checks shapes and dtypes.
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
}  // namespace

extern "C" void extension_cpp_muladd_launch(const float* a, const float* b, float c, float* out, int64_t n) {
  if (n > 0) muladd_kernel<<<blocks(n), kThreads>>>(a, b, c, out, n);
}
extern "C" void extension_cpp_mul_launch(const float* a, const float* b, float* out, int64_t n) {
  if (n > 0) mul_kernel<<<blocks(n), kThreads>>>(a, b, out, n);
}
extern "C" void extension_cpp_add_launch(const float* a, const float* b, float* out, int64_t n) {
  if (n > 0) add_kernel<<<blocks(n), kThreads>>>(a, b, out, n);
}
