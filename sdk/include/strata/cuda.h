// CUDA in this process: whether it can be used, its streams, and its memory.
//
// Streams. Each thread has a current stream per device (at first the device's
// default stream). The SDK's CUDA kernels, casts, fills and copies run on the
// current stream of the tensor's device, and memory a tensor gets is cached for
// that stream (Note [The caching allocator] in sdk/src/cuda/caching_allocator.h).
// A copy to the host waits for that stream only. A bundle's kernels launch on
// getCurrentStream(device).handle() so that they are ordered with the SDK's work.
//
// Memory. CUDA tensors take their memory from a caching allocator per device:
// freed blocks are kept for reuse instead of returned with cudaFree, so a steady
// workload makes no cudaMalloc calls. memory_stats() says what it holds;
// empty_cache() returns what no tensor uses to the device.
//
// Thread safety: every function here is safe to call from any thread; the current
// stream is per thread.
#pragma once

#include <cstdint>
#include <string>

#include "strata/export.h"

namespace strata {
class Tensor;
}

namespace strata::cuda {

// True when this SDK was compiled with the CUDA backend (STRATA_WITH_CUDA).
STRATA_API bool is_built();
// True when built with CUDA and at least one device answers. Never throws.
STRATA_API bool is_available();
// Number of visible devices; 0 when unavailable. Never throws.
STRATA_API int device_count();
// Why is_available() is false ("" when it is true), e.g. "strata was built
// without CUDA" or the CUDA runtime's own reason.
STRATA_API std::string unavailable_reason();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)". device -1: the current one.
// Throws Error(Device) without CUDA or for a device that does not exist.
STRATA_API std::string device_description(int device = -1);

// --- Streams ------------------------------------------------------------------

// A CUDA stream of one device. A handle only: it owns nothing, and streams the
// SDK hands out (the default stream, the pool's) live as long as the process.
class STRATA_API Stream {
 public:
  // handle: a cudaStream_t (nullptr: the device's default stream).
  // REQUIRES: device >= 0.
  constexpr Stream(void* handle, int device) : handle_(handle), device_(device) {}

  void* handle() const { return handle_; }  // cast to cudaStream_t to launch on it
  int device_index() const { return device_; }
  bool is_default() const { return handle_ == nullptr; }
  // True when every piece of work queued on the stream has finished.
  // Throws Error(Device) with the CUDA runtime's reason.
  bool query() const;
  // Waits for the work queued on this stream, and no other.
  void synchronize() const;
  // "the default stream of cuda:0", "stream 0x55d0... of cuda:1".
  std::string str() const;
  friend bool operator==(const Stream& a, const Stream& b) = default;

 private:
  void* handle_;
  int device_;
};

// device -1 is the current device. Each throws Error(Device) "CUDA is not
// available: <reason>" without a device, and names a device that does not exist.
STRATA_API Stream getDefaultStream(int device = -1);
// The calling thread's current stream of device; its default stream until set.
STRATA_API Stream getCurrentStream(int device = -1);
// Makes stream the calling thread's current stream of stream.device_index().
STRATA_API void setCurrentStream(Stream stream);
// One of a pool of streams per device (created on first use, never destroyed),
// handed out round-robin. They do not synchronize with the default stream
// (cudaStreamNonBlocking), as PyTorch's pool streams.
STRATA_API Stream getStreamFromPool(int device = -1);
// Waits for all work on device, every stream.
STRATA_API void synchronize(int device = -1);

// Makes stream current (for its device, on this thread) for the guard's lifetime,
// then restores the stream that was current. The current device is not changed.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream) : previous_(getCurrentStream(stream.device_index())) {
    setCurrentStream(stream);
  }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  ~StreamGuard() { setCurrentStream(previous_); }

 private:
  Stream previous_;
};

// Tells the allocator that tensor's memory is used by work on stream as well as
// on the stream it was allocated for: when the tensor's storage dies, the memory
// is reused only after the work queued on stream by then has finished (PyTorch's
// Tensor.record_stream). REQUIRES: tensor is a CUDA tensor whose memory the SDK
// allocated (Error(Value) otherwise).
STRATA_API void record_stream(const Tensor& tensor, Stream stream);

// --- Memory -------------------------------------------------------------------

// What one device's caching allocator holds and has done. Bytes are counted in
// the allocator's rounded block sizes (multiples of 512), except requested_bytes.
struct STRATA_API MemoryStats {
  uint64_t allocated_bytes = 0;       // in blocks tensors hold now
  uint64_t requested_bytes = 0;       // what was asked for, of those
  uint64_t reserved_bytes = 0;        // taken from the device (cudaMalloc) and not given back
  uint64_t peak_allocated_bytes = 0;  // since the start or reset_peak_memory_stats()
  uint64_t peak_reserved_bytes = 0;
  uint64_t active_blocks = 0;         // blocks tensors hold now
  uint64_t segments = 0;              // cudaMalloc'd regions held now
  uint64_t allocations = 0;           // allocations served, from the cache or not
  uint64_t device_mallocs = 0;        // cudaMalloc calls that succeeded
  uint64_t device_frees = 0;          // cudaFree calls (empty_cache, or retrying an allocation)
  uint64_t cache_flushes = 0;         // times the cache was freed to retry a failed cudaMalloc
  uint64_t ooms = 0;                  // allocations that failed even then

  // "allocated 4.00 MiB (peak 8.00 MiB), reserved 20.00 MiB (peak 20.00 MiB) in 1 segment;
  // 12 allocations, 1 cudaMalloc, 0 cudaFree, 0 out of memory"
  std::string str() const;
};

// The stats of device's allocator (-1: the current device, or device 0 when CUDA
// is unavailable). All zero for a device nothing was allocated on. Never throws.
STRATA_API MemoryStats memory_stats(int device = -1);
// Peak figures restart from the current ones. Never throws.
STRATA_API void reset_peak_memory_stats(int device = -1);
// Waits for every device, then gives every cached block no tensor holds back to
// the device (cudaFree), as torch.cuda.empty_cache(). Tensors are not affected.
// Without CUDA it does nothing.
STRATA_API void empty_cache();

}  // namespace strata::cuda
