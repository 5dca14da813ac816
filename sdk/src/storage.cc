#include "strata/storage.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "cuda/cuda_backend.h"
#include "strata/error.h"

namespace strata {

StorageImpl::~StorageImpl() {
  if (ptr_.deleter) ptr_.deleter(ptr_.ctx);
}

namespace {
constexpr size_t kCpuAlignment = 64;
// Up to this many bytes CPU data comes from malloc, aligned by hand (see below): with
// the 48 bytes for alignment, 1,008 at most, within the 1,032 bytes glibc's
// per-thread cache serves.
constexpr size_t kSmallCpuBytes = 960;

void freeCpu(void* ctx) { std::free(ctx); }
}  // namespace

Storage allocateStorage(size_t nbytes, Device device) {
  switch (device.type) {
    case DeviceType::CPU: {
      if (nbytes == 0) return make_intrusive<StorageImpl>(DataPtr{}, 0, kCPU);
      const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
      if (rounded <= kSmallCpuBytes) {
        // Small: malloc with room to align (glibc's per-thread cache serves it;
        // aligned_alloc never does, and its chunk splitting slowed every free).
        void* p = std::malloc(rounded + kCpuAlignment - alignof(std::max_align_t));
        STRATA_CHECK(p != nullptr, Device, "out of CPU memory allocating ", nbytes, " bytes");
        const auto at = (reinterpret_cast<uintptr_t>(p) + kCpuAlignment - 1) & ~uintptr_t{kCpuAlignment - 1};
        return make_intrusive<StorageImpl>(DataPtr{reinterpret_cast<void*>(at), p, &freeCpu}, nbytes, kCPU);
      }
      void* p = std::aligned_alloc(kCpuAlignment, rounded);
      STRATA_CHECK(p != nullptr, Device, "out of CPU memory allocating ", nbytes, " bytes");
      return make_intrusive<StorageImpl>(DataPtr{p, p, &freeCpu}, nbytes, kCPU);
    }
    case DeviceType::Meta:
      return make_intrusive<StorageImpl>(DataPtr{}, nbytes, kMeta);
    case DeviceType::CUDA: {
      const int index = device.index >= 0 ? device.index : detail::cuda::currentDevice();
      // Note [The caching allocator] in cuda/caching_allocator.h.
      return make_intrusive<StorageImpl>(detail::cuda::allocate(nbytes, index), nbytes,
                                         Device(DeviceType::CUDA, static_cast<int8_t>(index)));
    }
    case DeviceType::PrivateUse1:
      break;
  }
  STRATA_FAIL(Device, "cannot allocate on device ", device.str(),
              ": no allocator is registered for it");
}

}  // namespace strata
