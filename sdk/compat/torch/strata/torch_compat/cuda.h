// c10::cuda / at::cuda basics for PyTorch extension CUDA sources built against Strata
// (strata/torch_compat.h says what the shim covers). Needs the CUDA runtime headers
// (a .cu file, or a target linking CUDA::cudart).
//
// getCurrentCUDAStream() is Strata's current stream of the device (strata/cuda.h:
// the default stream until a strata::cuda::StreamGuard sets another), the one
// Strata's own kernels and copies run on and an extension's kernels should use for
// a later copy to wait for them.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <ostream>

#include "strata/cuda.h"
#include "strata/torch_compat/tensor.h"

namespace c10::cuda {

namespace detail {
[[noreturn]] inline void fail(cudaError_t e, const char* what, const char* file, int line) {
  strata::detail::throwError(strata::ErrorKind::Device, c10::str("CUDA error: ", cudaGetErrorString(e), " (", what,
                                                                 " at ", file, ":", line, ")"));
}
}  // namespace detail

inline DeviceIndex current_device() {
  int d = 0;
  const cudaError_t e = cudaGetDevice(&d);
  if (e != cudaSuccess) detail::fail(e, "cudaGetDevice", __FILE__, __LINE__);
  return static_cast<DeviceIndex>(d);
}
inline DeviceIndex device_count() noexcept { return static_cast<DeviceIndex>(strata::cuda::device_count()); }
inline void set_device(DeviceIndex d) {
  const cudaError_t e = cudaSetDevice(d);
  if (e != cudaSuccess) detail::fail(e, "cudaSetDevice", __FILE__, __LINE__);
}

// A CUDA stream of a device (c10::cuda::CUDAStream).
class CUDAStream {
 public:
  CUDAStream(cudaStream_t stream, DeviceIndex device) : stream_(stream), device_(device) {}
  cudaStream_t stream() const { return stream_; }
  operator cudaStream_t() const { return stream_; }  // NOLINT: kernel<<<g, b, 0, stream>>>
  DeviceIndex device_index() const { return device_; }
  Device device() const { return Device(DeviceType::CUDA, device_); }
  // Whether the stream's work is done; "not ready" is cleared, not left for the
  // next C10_CUDA_KERNEL_LAUNCH_CHECK to report, and any other error throws.
  bool query() const {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    detail::fail(e, "cudaStreamQuery", __FILE__, __LINE__);
  }
  void synchronize() const {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) detail::fail(e, "cudaStreamSynchronize", __FILE__, __LINE__);
  }
  friend bool operator==(const CUDAStream& a, const CUDAStream& b) {
    return a.stream_ == b.stream_ && a.device_ == b.device_;
  }
  friend std::ostream& operator<<(std::ostream& os, const CUDAStream& s) {
    return os << "stream " << static_cast<const void*>(s.stream_) << " on device cuda:" << int(s.device_);
  }

 private:
  cudaStream_t stream_;
  DeviceIndex device_;
};

inline CUDAStream getDefaultCUDAStream(DeviceIndex device_index = -1) {
  return CUDAStream(nullptr, device_index < 0 ? current_device() : device_index);
}
// The stream Strata's own CUDA work on the device runs on (see above).
inline CUDAStream getCurrentCUDAStream(DeviceIndex device_index = -1) {
  const strata::cuda::Stream s = strata::cuda::getCurrentStream(device_index < 0 ? current_device() : device_index);
  return CUDAStream(static_cast<cudaStream_t>(s.handle()), static_cast<DeviceIndex>(s.device_index()));
}

// Makes a device current for its lifetime, then restores the previous one.
class CUDAGuard {
 public:
  explicit CUDAGuard(DeviceIndex index) : previous_(current_device()) { set_device(index); }
  explicit CUDAGuard(Device device) : CUDAGuard(device.index() < 0 ? current_device() : device.index()) {}
  CUDAGuard(const CUDAGuard&) = delete;
  CUDAGuard& operator=(const CUDAGuard&) = delete;
  ~CUDAGuard() { cudaSetDevice(previous_); }

 private:
  DeviceIndex previous_;
};
// The same for a device that may be absent or not CUDA (then it does nothing).
class OptionalCUDAGuard {
 public:
  OptionalCUDAGuard() = default;
  explicit OptionalCUDAGuard(std::optional<Device> device) {
    if (device && device->is_cuda()) guard_ = std::make_unique<CUDAGuard>(*device);
  }

 private:
  std::unique_ptr<CUDAGuard> guard_;
};

}  // namespace c10::cuda

namespace at::cuda {
using namespace c10::cuda;  // NOLINT: at::cuda::getCurrentCUDAStream... as in ATen

// The properties of the current device (read once per device, kept for the process).
inline cudaDeviceProp* getCurrentDeviceProperties() {
  static const std::unique_ptr<cudaDeviceProp[]> props = [] {
    const int n = c10::cuda::device_count();
    auto p = std::make_unique<cudaDeviceProp[]>(n > 0 ? n : 1);
    for (int i = 0; i < n; ++i) cudaGetDeviceProperties(&p[i], i);
    return p;
  }();
  return &props[c10::cuda::current_device()];
}
}  // namespace at::cuda

// C10_CUDA_CHECK(expr): throws Error(Device) with the CUDA runtime's reason when expr
// is not cudaSuccess. C10_CUDA_KERNEL_LAUNCH_CHECK(): the same for the last launch.
#define C10_CUDA_CHECK(EXPR)                                                                 \
  do {                                                                                       \
    const cudaError_t c10_cuda_error_ = (EXPR);                                              \
    if (c10_cuda_error_ != cudaSuccess) ::c10::cuda::detail::fail(c10_cuda_error_, #EXPR, __FILE__, __LINE__); \
  } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
