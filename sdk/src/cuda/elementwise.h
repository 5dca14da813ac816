// Internal: launchers of the core:: CUDA kernels (elementwise.cu). Each takes
// contiguous device buffers of n elements, launches on the given stream and returns
// the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::detail::cuda {

enum class BinaryOp : int { Add, Sub, Mul, Div };
enum class UnaryOp : int { Neg, Sin, Cos, Exp };
// The SDK's dtypes, without including its C++20 headers into nvcc's C++17.
enum class DType : int { U8, I8, I32, I64, F16, F32, F64, Bool, BF16 };

// Where a kernel runs: the stream, and its device (for the grid's size).
struct Launch {
  cudaStream_t stream;
  int device;
};

// out = a (op) alpha*b for Add/Sub, a (op) b otherwise. dtype: F32, F64, I32 or I64.
cudaError_t launchBinary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, int64_t n, double alpha,
                         Launch where);
// dtype: F32, F64, I32 or I64.
cudaError_t launchUnary(UnaryOp op, DType dtype, const void* a, void* out, int64_t n, Launch where);
cudaError_t launchCast(DType from, const void* src, DType to, void* dst, int64_t n, Launch where);

// A grid for a grid-stride loop over `items` work items of kThreads-thread blocks:
// enough blocks to fill every SM of device (8 resident blocks each), no more than
// the work needs.
constexpr unsigned kThreads = 256;
unsigned gridFor(int64_t items, int device);

}  // namespace strata::detail::cuda
