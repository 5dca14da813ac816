// The CUDA kernel the cuda/ scenarios launch: a*b+c on float32, as the muladd
// bundle's, one element per thread. Returns the launch's error; the kernel runs
// asynchronously on stream.
#include <cuda_runtime.h>

#include <cstdint>

namespace {
__global__ void muladd_kernel(const float* a, const float* b, float c, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i] + c;
}
}  // namespace

cudaError_t strataBenchMulAdd(const float* a, const float* b, float c, float* out, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  muladd_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a, b, c, out, n);
  return cudaGetLastError();
}
