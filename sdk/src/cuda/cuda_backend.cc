#include "cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "strata/cuda.h"
#include "strata/error.h"

namespace strata {
namespace detail::cuda {
// Defined in fill.cu.
cudaError_t launchFill(void* dst, uint64_t pattern, size_t elem_size, size_t count);

namespace {
std::string availabilityError() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA device is visible";
  return "";
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  STRATA_FAIL(Device, "CUDA error in ", what, ": ", cudaGetErrorString(e));
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (device >= 0 && device != prev_) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(prev_); }

 private:
  int prev_ = 0;
};
}  // namespace

void requireAvailable() {
  const std::string why = availabilityError();
  STRATA_CHECK(why.empty(), Device, "CUDA is not available: ", why);
}

int currentDevice() {
  requireAvailable();
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

void* malloc(size_t nbytes, int device) {
  requireAvailable();
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  STRATA_CHECK(device < count, Device, "CUDA device ", device, " does not exist (", count,
               " visible)");
  if (nbytes == 0) return nullptr;
  DeviceGuard guard(device);
  void* p = nullptr;
  check(cudaMalloc(&p, nbytes), "cudaMalloc");
  return p;
}

void free(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);
}

void memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind) {
  if (nbytes == 0) return;
  requireAvailable();
  const cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDeviceToDevice;
  check(cudaMemcpy(dst, src, nbytes, k), "cudaMemcpy");
}

void fill(void* dst, const void* pattern, size_t elem_size, size_t count, int device) {
  if (count == 0) return;
  requireAvailable();
  DeviceGuard guard(device);
  uint64_t bits = 0;
  std::memcpy(&bits, pattern, elem_size);
  // Asynchronous like every kernel launch (see core_cuda.cc): a copy to the host waits.
  check(launchFill(dst, bits, elem_size, count), "fill kernel launch");
}

}  // namespace detail::cuda

namespace cuda {
bool is_built() { return true; }
bool is_available() { return detail::cuda::availabilityError().empty(); }
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
std::string unavailable_reason() { return detail::cuda::availabilityError(); }
}  // namespace cuda

}  // namespace strata
