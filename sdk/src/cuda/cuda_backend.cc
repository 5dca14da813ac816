// The CUDA backend: availability, the caching allocator's real device, the
// per-thread current streams, and copies and fills on them.
#include "cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/caching_allocator.h"
#include "strata/cuda.h"
#include "strata/dispatcher.h"
#include "strata/error.h"
#include "strata/tensor.h"

namespace strata {
namespace detail::cuda {
// Defined in fill.cu.
cudaError_t launchFill(void* dst, uint64_t pattern, size_t elem_size, size_t count, cudaStream_t stream);

namespace {

// Device indices the backend keeps state for (a Device's index is an int8_t).
constexpr int kMaxDevices = 64;
// Streams per device in getStreamFromPool's pool, as PyTorch's.
constexpr int kStreamsPerPool = 32;

struct Availability {
  int count = 0;
  std::string why;  // "" when available
};
// Asked once: the devices a process sees do not change while it runs.
const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    const cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later queries start clean
      r.count = 0;
      r.why = cudaGetErrorString(e);
    } else if (r.count == 0) {
      r.why = "no CUDA device is visible";
    }
    return r;
  }();
  return a;
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  STRATA_FAIL(Device, "CUDA error in ", what, ": ", cudaGetErrorString(e));
}

void checkDevice(int device) {
  requireAvailable();
  const int count = availability().count;
  STRATA_CHECK(device >= 0 && device < count && device < kMaxDevices, Device, "CUDA device ", device,
               " does not exist (", count, " visible)");
}

int resolve(int device) {
  if (device < 0) return currentDevice();
  checkDevice(device);
  return device;
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (device >= 0 && device != prev_) {
      check(cudaSetDevice(device), "cudaSetDevice");
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
  bool changed_ = false;
};

// The caching allocator's device: cudaMalloc, cudaFree and a free list of events.
// Called under the allocator's lock, so events_ needs no lock of its own.
class CudaDevice final : public DeviceInterface {
 public:
  explicit CudaDevice(int device) : device_(device) {}

  void* malloc(size_t nbytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, nbytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    check(e, "cudaMalloc");
    return p;
  }
  void free(void* ptr) noexcept override {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device_);
    cudaFree(ptr);
    cudaSetDevice(prev);
  }
  EventHandle recordEvent(StreamHandle stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t ev = nullptr;
    if (!events_.empty()) {
      ev = events_.back();
      events_.pop_back();
    } else {
      check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    const cudaError_t e = cudaEventRecord(ev, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) {
      events_.push_back(ev);
      check(e, "cudaEventRecord");
    }
    return ev;
  }
  bool queryEvent(EventHandle event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(e, "cudaEventQuery");
    return true;
  }
  void releaseEvent(EventHandle event) noexcept override { events_.push_back(static_cast<cudaEvent_t>(event)); }
  void synchronize() override {
    DeviceGuard guard(device_);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::pair<size_t, size_t> memoryInfo() override {
    size_t free_bytes = 0, total = 0;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device_);
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
      cudaGetLastError();
      free_bytes = total = 0;
    }
    cudaSetDevice(prev);
    return {free_bytes, total};
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }

 private:
  int device_;
  std::vector<cudaEvent_t> events_;
};

// One allocator per device, made on first use and never destroyed: tensors may
// die during static destruction, and their memory still goes back to one.
std::array<std::atomic<CachingAllocator*>, kMaxDevices> g_allocators{};
std::mutex g_allocators_mu;

CachingAllocator& allocatorFor(int device) {
  if (CachingAllocator* a = g_allocators[device].load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(g_allocators_mu);
  if (CachingAllocator* a = g_allocators[device].load(std::memory_order_relaxed)) return *a;
  auto* a = new CachingAllocator(std::make_unique<CudaDevice>(device));
  g_allocators[device].store(a, std::memory_order_release);
  return *a;
}

// A deleter per device, so that a DataPtr's ctx can be the pointer itself.
template <size_t D>
void freeOnDevice(void* ptr) {
  g_allocators[D].load(std::memory_order_acquire)->free(ptr);
}
template <size_t... D>
constexpr std::array<void (*)(void*), kMaxDevices> makeDeleters(std::index_sequence<D...>) {
  return {&freeOnDevice<D>...};
}
constexpr std::array<void (*)(void*), kMaxDevices> kDeleters = makeDeleters(std::make_index_sequence<kMaxDevices>());

// The calling thread's current stream of each device (nullptr: the default stream).
thread_local std::array<void*, kMaxDevices> t_current_streams{};

struct StreamPool {
  std::once_flag made;
  std::array<cudaStream_t, kStreamsPerPool> streams{};
  std::atomic<unsigned> next{0};
};
std::array<StreamPool, kMaxDevices> g_pools;

std::string streamText(void* stream, int device) {
  return strata::cuda::Stream(stream, device).str();
}

}  // namespace

void requireAvailable() {
  const std::string& why = availability().why;
  STRATA_CHECK(why.empty(), Device, "CUDA is not available: ", why);
}

int currentDevice() {
  requireAvailable();
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

void* currentStream(int device) { return t_current_streams[device]; }

DataPtr allocate(size_t nbytes, int device) {
  checkDevice(device);
  if (nbytes == 0) return DataPtr{};
  CachingAllocator& allocator = allocatorFor(device);
  void* stream = t_current_streams[device];
  if (!dispatch_observed()) {
    void* p = allocator.allocate(nbytes, stream);
    return DataPtr{p, p, kDeleters[device]};
  }
  // Under explain() or the dispatch trace: say where the memory came from.
  const uint64_t mallocs = allocator.stats().device_mallocs;
  void* p = allocator.allocate(nbytes, stream);
  const strata::cuda::MemoryStats now = allocator.stats();
  note_dispatch_step("cuda:" + std::to_string(device) + " caching allocator: " + formatBytes(nbytes) + " for " +
                     streamText(stream, device) +
                     (now.device_mallocs > mallocs ? ", a new segment (cudaMalloc)" : ", from its cache") + "; " +
                     now.str());
  return DataPtr{p, p, kDeleters[device]};
}

void memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind, int device, int src_device) {
  if (nbytes == 0) return;
  checkDevice(device);
  cudaStream_t stream = static_cast<cudaStream_t>(t_current_streams[device]);
  DeviceGuard guard(device);
  if (kind == CopyKind::DeviceToDevice && src_device >= 0 && src_device != device) {
    checkDevice(src_device);
    strata::cuda::getCurrentStream(src_device).synchronize();
  }
  const cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDeviceToDevice;
  // From pageable host memory, cudaMemcpyAsync returns once the source is staged,
  // so the caller may free it at once.
  check(cudaMemcpyAsync(dst, src, nbytes, k, stream), "cudaMemcpyAsync");
  // To the host: the caller reads it next. Across devices: the source's memory
  // belongs to its own device's pools, which would hand it out again as soon as the
  // source tensor dies, with nothing ordering that after this copy's read.
  const bool cross_device = kind == CopyKind::DeviceToDevice && src_device >= 0 && src_device != device;
  if (kind == CopyKind::DeviceToHost || cross_device) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void fill(void* dst, const void* pattern, size_t elem_size, size_t count, int device) {
  if (count == 0) return;
  checkDevice(device);
  DeviceGuard guard(device);
  uint64_t bits = 0;
  std::memcpy(&bits, pattern, elem_size);
  // Asynchronous like every kernel launch (see core_cuda.cc): a copy to the host waits.
  check(launchFill(dst, bits, elem_size, count, static_cast<cudaStream_t>(t_current_streams[device])),
        "fill kernel launch");
}

}  // namespace detail::cuda

namespace cuda {
using detail::cuda::availability;
using detail::cuda::check;
using detail::cuda::DeviceGuard;
using detail::cuda::g_allocators;
using detail::cuda::kMaxDevices;

bool is_built() { return true; }
bool is_available() { return availability().why.empty(); }
int device_count() { return availability().count; }
std::string unavailable_reason() { return availability().why; }

std::string device_description(int device) {
  const int d = detail::cuda::resolve(device);
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties");
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + detail::cuda::formatBytes(p.totalGlobalMem) + ")";
}

bool Stream::query() const {
  DeviceGuard guard(device_);
  const cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(e, "cudaStreamQuery");
  return true;
}

void Stream::synchronize() const {
  DeviceGuard guard(device_);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)), "cudaStreamSynchronize");
}

std::string Stream::str() const {
  if (handle_ == nullptr) return "the default stream of cuda:" + std::to_string(device_);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", handle_);
  return std::string("stream ") + buf + " of cuda:" + std::to_string(device_);
}

Stream getDefaultStream(int device) { return Stream(nullptr, detail::cuda::resolve(device)); }

Stream getCurrentStream(int device) {
  const int d = detail::cuda::resolve(device);
  return Stream(detail::cuda::t_current_streams[d], d);
}

void setCurrentStream(Stream stream) {
  detail::cuda::checkDevice(stream.device_index());
  detail::cuda::t_current_streams[stream.device_index()] = stream.handle();
}

Stream getStreamFromPool(int device) {
  const int d = detail::cuda::resolve(device);
  detail::cuda::StreamPool& pool = detail::cuda::g_pools[d];
  std::call_once(pool.made, [&] {
    DeviceGuard guard(d);
    for (cudaStream_t& s : pool.streams) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  });
  return Stream(pool.streams[pool.next.fetch_add(1, std::memory_order_relaxed) % detail::cuda::kStreamsPerPool], d);
}

void synchronize(int device) {
  DeviceGuard guard(detail::cuda::resolve(device));
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void record_stream(const Tensor& tensor, Stream stream) {
  STRATA_CHECK(tensor.defined() && tensor.is_cuda(), Value, "record_stream: expected a CUDA tensor, got ",
               tensor.defined() ? tensor.device().str() : std::string("an undefined tensor"));
  const int d = tensor.device().index;
  STRATA_CHECK(stream.device_index() == d, Value, "record_stream: the tensor is on cuda:", d, " but ", stream.str(),
               " is not");
  if (tensor.storage()->data() == nullptr) return;  // no bytes (a tensor of zero elements): nothing to hold
  detail::cuda::CachingAllocator* a = d >= 0 && d < kMaxDevices ? g_allocators[d].load() : nullptr;
  STRATA_CHECK(a != nullptr, Value, "record_stream: the tensor's memory was not allocated by Strata's allocator");
  a->recordStream(tensor.storage()->data(), stream.handle());
}

MemoryStats memory_stats(int device) {
  try {
    if (device < 0) device = is_available() ? detail::cuda::currentDevice() : 0;
  } catch (const Error&) {
    device = 0;
  }
  if (device < 0 || device >= kMaxDevices) return {};
  const detail::cuda::CachingAllocator* a = g_allocators[device].load(std::memory_order_acquire);
  return a != nullptr ? a->stats() : MemoryStats{};
}

void reset_peak_memory_stats(int device) {
  try {
    if (device < 0) device = is_available() ? detail::cuda::currentDevice() : 0;
  } catch (const Error&) {
    return;
  }
  if (device < 0 || device >= kMaxDevices) return;
  if (auto* a = g_allocators[device].load(std::memory_order_acquire)) a->resetPeakStats();
}

void empty_cache() {
  for (auto& slot : g_allocators) {
    if (auto* a = slot.load(std::memory_order_acquire)) a->emptyCache();
  }
}

}  // namespace cuda

}  // namespace strata
