// Internal: the CUDA runtime calls the SDK makes. Each throws strata::Error(Device)
// with "CUDA is not available: <reason>" when there is no usable device, and with
// the CUDA runtime's message when a call fails. Built from cuda_backend.cc when
// the SDK has CUDA, and from no_cuda.cc (every call refuses) when it has not.
#pragma once

#include <cstddef>

namespace strata::detail::cuda {

void requireAvailable();
int currentDevice();
void* malloc(size_t nbytes, int device);
void free(void* ptr) noexcept;
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
void memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind);
// Writes count copies of the elem_size-byte pattern at dst (device memory).
// REQUIRES: elem_size is 1, 2, 4 or 8.
void fill(void* dst, const void* pattern, size_t elem_size, size_t count, int device);

}  // namespace strata::detail::cuda
