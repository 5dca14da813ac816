// The one CUDA kernel the SDK itself needs: filling device memory with a value
// (zeros, ones, full), on the stream it is given. Everything else crosses devices
// with cudaMemcpyAsync.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace strata::detail::cuda {
namespace {
template <typename T>
__global__ void fillKernel(T* dst, T value, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

template <typename T>
cudaError_t launch(void* dst, uint64_t bits, size_t count, cudaStream_t stream) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  constexpr unsigned kThreads = 256;
  const size_t wanted = (count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 ? (wanted > 0 ? wanted : 1) : 65535);
  fillKernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), value, count);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launchFill(void* dst, uint64_t pattern, size_t elem_size, size_t count, cudaStream_t stream) {
  switch (elem_size) {
    case 1: return launch<uint8_t>(dst, pattern, count, stream);
    case 2: return launch<uint16_t>(dst, pattern, count, stream);
    case 4: return launch<uint32_t>(dst, pattern, count, stream);
    case 8: return launch<uint64_t>(dst, pattern, count, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace strata::detail::cuda
