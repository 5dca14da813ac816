#include "strata/storage.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "cuda/cuda_backend.h"
#include "strata/error.h"

namespace strata {

StorageImpl::~StorageImpl() {
  if (ptr_.deleter) ptr_.deleter(ptr_.ctx);
}

namespace {
constexpr size_t kCpuAlignment = 64;
// Up to this many bytes CPU data comes from malloc, aligned by hand with 63 bytes of
// slack (see below). Up to 960, within the 1,032 bytes glibc's per-thread cache
// serves; above, from malloc's bins, which is still cheaper than aligned_alloc (its
// chunk splitting made a 1 KiB tensor ~40 ns slower to make and free, measured with
// vmap/muladd_plain/64). 64 KiB keeps malloc below its mmap threshold.
constexpr size_t kSmallCpuBytes = 65536;

void freeCpu(void* ctx) { std::free(ctx); }
}  // namespace

Storage allocateStorage(size_t nbytes, Device device) {
  switch (device.type) {
    case DeviceType::CPU: {
      if (nbytes == 0) return make_intrusive<StorageImpl>(DataPtr{}, 0, kCPU);
      const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
      // The block is freed if making the StorageImpl throws (the pool may be out of memory too).
      std::unique_ptr<void, void (*)(void*)> block(nullptr, &std::free);
      void* data = nullptr;
      if (rounded <= kSmallCpuBytes) {
        // Small: malloc with room to align whatever malloc's own alignment (glibc's
        // per-thread cache serves malloc; aligned_alloc never, and its chunk splitting
        // slowed every free).
        block.reset(std::malloc(rounded + kCpuAlignment - 1));
        STRATA_CHECK(block != nullptr, Device, "out of CPU memory allocating ", nbytes, " bytes");
        data = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(block.get()) + kCpuAlignment - 1) &
                                       ~uintptr_t{kCpuAlignment - 1});
      } else {
        block.reset(std::aligned_alloc(kCpuAlignment, rounded));
        STRATA_CHECK(block != nullptr, Device, "out of CPU memory allocating ", nbytes, " bytes");
        data = block.get();
      }
      Storage storage = make_intrusive<StorageImpl>(DataPtr{data, block.get(), &freeCpu}, nbytes, kCPU);
      block.release();
      return storage;
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
