// The CUDA backend of an SDK built without CUDA: every call refuses with a clear
// reason, so code that names a CUDA device fails the same way on every build.
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
void* malloc(size_t, int) { requireAvailable(); return nullptr; }
void free(void*) noexcept {}
void memcpy(void*, const void*, size_t, CopyKind) { requireAvailable(); }
void fill(void*, const void*, size_t, size_t, int) { requireAvailable(); }
}  // namespace detail::cuda

namespace cuda {
bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return detail::cuda::kWhy; }
}  // namespace cuda
}  // namespace strata
