// The CUDA backend of an SDK built without CUDA: every call refuses with a clear
// reason, so code that names a CUDA device fails the same way on every build. The
// memory figures are all zero, and empty_cache() has nothing to do.
#include "cuda/cuda_backend.h"
#include "strata/cuda.h"
#include "strata/error.h"

namespace strata {
namespace detail::cuda {
namespace {
constexpr const char* kWhy = "strata was built without CUDA (configure with STRATA_WITH_CUDA=ON)";
}
void requireAvailable() { STRATA_FAIL(Device, "CUDA is not available: ", kWhy); }
int currentDevice() { requireAvailable(); return 0; }
DataPtr allocate(size_t, int) { requireAvailable(); return {}; }
void* currentStream(int) { requireAvailable(); return nullptr; }
void memcpy(void*, const void*, size_t, CopyKind, int, int) { requireAvailable(); }
void fill(void*, const void*, size_t, size_t, int) { requireAvailable(); }
}  // namespace detail::cuda

namespace cuda {
bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return detail::cuda::kWhy; }
std::string device_description(int) { detail::cuda::requireAvailable(); return {}; }

bool Stream::query() const { detail::cuda::requireAvailable(); return true; }
void Stream::synchronize() const { detail::cuda::requireAvailable(); }
std::string Stream::str() const {
  return (handle_ == nullptr ? std::string("the default stream") : std::string("a stream")) + " of cuda:" +
         std::to_string(device_);
}
Stream getDefaultStream(int) { detail::cuda::requireAvailable(); return Stream(nullptr, 0); }
Stream getCurrentStream(int) { detail::cuda::requireAvailable(); return Stream(nullptr, 0); }
void setCurrentStream(Stream) { detail::cuda::requireAvailable(); }
Stream getStreamFromPool(int) { detail::cuda::requireAvailable(); return Stream(nullptr, 0); }
void synchronize(int) { detail::cuda::requireAvailable(); }
void record_stream(const Tensor&, Stream) { detail::cuda::requireAvailable(); }
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}
}  // namespace cuda
}  // namespace strata
