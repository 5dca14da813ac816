// Internal: the CUDA runtime calls the SDK makes. Each throws strata::Error(Device)
// with "CUDA is not available: <reason>" when there is no usable device, and with
// the CUDA runtime's message when a call fails. Built from cuda_backend.cc when
// the SDK has CUDA, and from no_cuda.cc (every call refuses) when it has not.
//
// Work runs on the calling thread's current stream of the device it concerns
// (strata/cuda.h), never on another.
#pragma once

#include <cstddef>

#include "strata/storage.h"

namespace strata::detail::cuda {

void requireAvailable();
int currentDevice();
// nbytes on device from its caching allocator (Note [The caching allocator]), for
// the current stream there; the DataPtr's deleter gives the block back.
DataPtr allocate(size_t nbytes, int device);
// The calling thread's current stream of device, as a cudaStream_t (nullptr: the
// default stream). REQUIRES: requireAvailable() passed and device exists.
void* currentStream(int device);
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
// Copies on the current stream of device (the CUDA side's device; for DeviceToDevice,
// dst's). A copy to the host returns once that stream has finished it; a copy from
// a src_device other than device first waits for src_device's current stream.
void memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind, int device, int src_device = -1);
// Writes count copies of the elem_size-byte pattern at dst (device memory), on the
// current stream of device. REQUIRES: elem_size is 1, 2, 4 or 8.
void fill(void* dst, const void* pattern, size_t elem_size, size_t count, int device);

}  // namespace strata::detail::cuda
