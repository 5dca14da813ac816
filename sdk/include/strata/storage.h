// The memory behind tensors.
//
// A StorageImpl owns one allocation on one device, and views of a tensor share it.
// Who frees the memory is decided by the DataPtr: the SDK's allocators free what
// they allocated; storage imported from DLPack calls the producer's deleter.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "strata/device.h"
#include "strata/export.h"
#include "strata/intrusive_ptr.h"

namespace strata {

// A data pointer plus how to release it: deleter(ctx) runs once, when the storage
// dies. ctx may differ from data (e.g. a DLManagedTensor*).
struct DataPtr {
  void* data = nullptr;
  void* ctx = nullptr;
  void (*deleter)(void* ctx) = nullptr;
};

// Thread safety: immutable after construction except through the data pointer.
class STRATA_API StorageImpl final : public intrusive_ptr_target {
 public:
  STRATA_POOLED_OBJECT  // Note [Small object pools]
  StorageImpl(DataPtr ptr, size_t nbytes, Device device)
      : ptr_(ptr), nbytes_(nbytes), device_(device) {}
  ~StorageImpl() override;
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return ptr_.data; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // The version counter autograd checks saved tensors against (Note [Version
  // counters] in modes/autograd.h): every in-place write to the memory bumps it, so
  // all views of a storage share one count. Relaxed: a write racing a read of the
  // same data is a data race anyway.
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() const { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  DataPtr ptr_;
  size_t nbytes_;
  Device device_;
  mutable std::atomic<uint32_t> version_{0};
};

using Storage = intrusive_ptr<StorageImpl>;

// Allocates nbytes on device (64-byte aligned on CPU; on CUDA, 512-byte aligned from
// the device's caching allocator, for the thread's current stream: strata/cuda.h;
// no memory at all on Meta). A CUDA device with index -1 resolves to the current
// device. Throws strata::Error(Device) when the device is unavailable or out of
// memory, naming the reason.
STRATA_API Storage allocateStorage(size_t nbytes, Device device);

}  // namespace strata
